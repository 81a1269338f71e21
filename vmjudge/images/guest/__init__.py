"""Code that runs inside the judge's VM. It is copied into the image as plain files, so it
uses only the standard library; the host imports frames.py from here to share the format."""
