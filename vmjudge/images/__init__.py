"""Guest image build (build.py, build_step.py, initramfs.py, kernel_modules.py, gpu_driver.py), the image
and its manifest (image.py), moving a built image to another host (transfer.py, tar_format.py), ISO media
(iso.py), a container entry's root file system made from its image (entry_root.py, with the tools in
root_tools.py and the tree made safe in root_tree.py), and (under guest/) the code that runs inside the VM."""
