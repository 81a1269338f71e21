"""The supervisor: runs jobs in libvirt VMs and reads their results from the serial link."""
