"""`python seccomp_wrap.py MODE -- ARGV...`: exec ARGV under a seccomp filter that takes a kernel feature away.

What the machines omega must degrade on give it less of (x86_64 only; the filter is inherited by
everything ARGV starts, as a container's is):
  nouserns    user namespaces refused: `unshare` and `clone(CLONE_NEWUSER)` fail with EPERM and
              `clone3` with ENOSYS, as Docker's default seccomp profile does;
  nomount     user namespaces work but nothing may be mounted in them (`mount`, `umount2`,
              `pivot_root` and the new mount API fail with EPERM), as Ubuntu 24.04's AppArmor default gives;
  nolandlock  the Landlock syscalls fail with ENOSYS, as on a kernel built without it.
Standard library only (ctypes), so it runs before anything of omega is imported.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2

# syscall number -> (errno, a flag of the first argument that must be set, or 0 for any call)
MODES: dict[str, dict[int, tuple[int, int]]] = {
    "nouserns": {272: (errno.EPERM, 0), 56: (errno.EPERM, CLONE_NEWUSER), 435: (errno.ENOSYS, 0)},
    "nomount": {nr: (errno.EPERM, 0) for nr in (165, 166, 155, 428, 429, 430, 431, 432, 442)},
    "nolandlock": {nr: (errno.ENOSYS, 0) for nr in (444, 445, 446)},
}


def _stmt(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(rules: dict[int, tuple[int, int]]) -> list[bytes]:
    """The BPF program: other architectures and other syscalls are allowed."""
    prog = [_stmt(LD_W_ABS, 4), _jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), _stmt(RET_K, RET_ALLOW), _stmt(LD_W_ABS, 0)]
    for nr, (err, flag) in rules.items():
        ret = 0x00050000 | err
        if not flag:
            prog += [_jump(JEQ_K, nr, 0, 1), _stmt(RET_K, ret)]
        else:  # the low word of args[0] (offset 16) has `flag`: refuse; then the number again
            prog += [_jump(JEQ_K, nr, 0, 4), _stmt(LD_W_ABS, 16), _jump(JSET_K, flag, 0, 1), _stmt(RET_K, ret)]
            prog.append(_stmt(LD_W_ABS, 0))
    prog.append(_stmt(RET_K, RET_ALLOW))
    return prog


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[argv.index("--") + 1 :]
    prog = program(MODES[mode])
    buf = ctypes.create_string_buffer(b"".join(prog))
    fprog = _Fprog(len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    os.execvp(rest[0], rest)


if __name__ == "__main__":
    main(sys.argv[1:])
