"""The VM machinery: the libvirt domain (domain_xml.py what it is made of, domain.py its
lifecycle), one job in one VM (runner.py, job.py its CD), and the data channel (pty_reader.py
its bytes, channel.py its frames, reading.py the host's limits while reading), and what a run
ran on (hardware.py, for the manifest; libvirt_uri.py whether that is this machine). It knows
nothing of stages or the queue."""
