"""A program that runs one AVX2 instruction, for the guest's Python: `vpxor ymm0, ymm0, ymm0` (a
256-bit integer operation, which AVX alone lacks), `vzeroupper`, `ret`, put in an executable page
and called through ctypes. On a CPU without AVX2 (qemu64) the kernel kills it with SIGILL, as it
would kill a wheel built for today's CPUs; with AVX2 it prints AVX2_OK and exits 0."""

from __future__ import annotations

import shlex

AVX2_OK = "avx2 instruction ran"
CODE = bytes((0xC5, 0xFD, 0xEF, 0xC0, 0xC5, 0xF8, 0x77, 0xC3))
PROGRAM = (
    "import ctypes, mmap\n"
    f"code = {CODE!r}\n"
    "page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    "page.write(code)\n"
    "ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()\n"
    f"print({AVX2_OK!r})\n"
)
SHELL = f"python3 -c {shlex.quote(PROGRAM)}"  # one line of sh
