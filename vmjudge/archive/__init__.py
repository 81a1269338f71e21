"""The entry archive, a participant's untrusted zip or tar.gz, from its name to its unpacked
tree: names.py (the name rule, which gives the kind), bounded.py (opening and listing at a
bounded cost), checks.py (what `submit` checks without unpacking), members.py (each member's
name and type), unpack.py (the safe unpack prep runs), zip_data.py (a zip member's data,
bounded) and joliet.py (the CD's name rule that entry names must meet). A container entry's
image archive (#39): image_layout.py (the outer tar and the one image it names),
image_layers.py (each layer read through and checked) and container_image.py (the two together,
and the image's run settings)."""
