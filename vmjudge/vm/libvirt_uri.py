"""Whether site.toml's [libvirt] uri reaches libvirt on this machine or on another one.

The URI may name libvirt elsewhere (qemu+ssh://judge2/system): the VMs then run on that
machine, and this one's /proc/cpuinfo, core count, kernel and CPU affinity say nothing of
it (hardware.py, pinning.py read libvirt's own host data instead). libvirt's URIs read
`driver[+transport]://[user@][host][:port]/path[?params]`. Local means no host part and no
transport but the local socket's: qemu:///system, qemu:///session, qemu+unix:///system
(?socket=… included), test:///default. Anything else is taken as another machine: a host
part (even localhost), and the ssh, tcp, tls, libssh and ext transports, which libvirt
sends somewhere else even with no host named. Erring that way costs little: what libvirt
says of its host is right for this machine too; only the daemon's own CPU affinity
(taskset) and the kernel's release are lost.
"""

from __future__ import annotations

from urllib.parse import urlsplit

LOCAL_TRANSPORTS = ("", "unix")


def is_local(uri: str) -> bool:
    parts = urlsplit(uri)
    transport = parts.scheme.partition("+")[2]
    return not parts.netloc and transport in LOCAL_TRANSPORTS
