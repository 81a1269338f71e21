"""The GPU memory in use, for a GPU stage's samples over time (samples.py): read through NVML,
the driver's management library (libnvidia-ml.so.1, which nvidia-smi itself reads), in the
agent's own process.

nvidia-smi every half second would be a process of its own for each sample, under emulation a
cost the entry's case pays; NVML's query is one ioctl. The library is opened once per job, when
the job says "gpu": true and the card was found working (greet), and only then is ctypes
imported. The card's whole use is read (nvmlDeviceGetMemoryInfo's `used`): the VM has one card,
and only the entry's commands use it. Every failure leaves the meter None, or a reading None:
a measurement, never a reason for the command or the job to fail. The library's path is an
argument, so the host's tests load a fake built from C (no GPU is lent to this project).
"""

LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0


class GpuMemory:
    """`used()`: the bytes in use on the card now, or None when NVML does not answer."""

    def __init__(self, lib, handle, memory_type, byref):
        self.lib, self.handle, self.memory_type, self.byref = lib, handle, memory_type, byref

    def used(self):
        info = self.memory_type()
        try:
            code = self.lib.nvmlDeviceGetMemoryInfo(self.handle, self.byref(info))
        except OSError:
            return None
        return int(info.used) if code == NVML_SUCCESS else None


def open_meter(library=LIBRARY, index=0):
    """The meter of the card at `index`, or None when the library cannot be loaded or started."""
    import ctypes  # only on a GPU stage: every import is paid at each boot

    class Memory(ctypes.Structure):  # nvmlMemory_t
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    try:
        lib = ctypes.CDLL(library)
        lib.nvmlInit_v2.restype = ctypes.c_int
        lib.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
        lib.nvmlDeviceGetHandleByIndex_v2.restype = ctypes.c_int
        lib.nvmlDeviceGetMemoryInfo.argtypes = [ctypes.c_void_p, ctypes.POINTER(Memory)]
        lib.nvmlDeviceGetMemoryInfo.restype = ctypes.c_int
        if lib.nvmlInit_v2() != NVML_SUCCESS:
            return None
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != NVML_SUCCESS:
            return None
    except (OSError, AttributeError):  # no such library, or one without these functions
        return None
    return GpuMemory(lib, handle, Memory, ctypes.byref)

