"""The system calls a worker may make: an allow-list, installed as a seccomp filter in every worker.

Standard library only: `sandbox_init` (run as `python -I -S`) installs it after `no_new_privs` and before the
worker execs or serves, at every isolation level, in the exec'd and the forked path alike. The classic BPF
program is built here by hand. It kills a process that enters the kernel through another architecture's door
(32-bit calls on a 64-bit kernel), refuses x32 numbers, then finds the call's number by binary search and
allows it, checks one of its arguments, or refuses it: EPERM for a call the table below names, ENOSYS (what a
kernel without the call answers, so userland falls back) for clone3 and for any call newer than the table.
docs/threat-model.md lists what is refused and why.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
import zlib

# Each architecture's calls by number: consecutive names from a first number, as in the kernel's tables up to
# Linux 6.17 (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: include/uapi/asm-generic/unistd.h).
# Numbers from 424 on are the same on every architecture.
_X86_64 = (
    "read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction rt_sigprocmask "
    "rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select sched_yield mremap msync mincore "
    "madvise shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm setitimer getpid sendfile socket "
    "connect accept sendto recvfrom sendmsg recvmsg shutdown bind listen getsockname getpeername socketpair "
    "setsockopt getsockopt clone fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget "
    "msgsnd msgrcv msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename "
    "mkdir rmdir creat link unlink symlink readlink chmod fchmod chown fchown lchown umask gettimeofday "
    "getrlimit getrusage sysinfo times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid "
    "getppid getpgrp setsid setreuid setregid getgroups setgroups setresuid getresuid setresgid getresgid "
    "getpgid setfsuid setfsgid getsid capget capset rt_sigpending rt_sigtimedwait rt_sigqueueinfo "
    "rt_sigsuspend sigaltstack utime mknod uselib personality ustat statfs fstatfs sysfs getpriority "
    "setpriority sched_setparam sched_getparam sched_setscheduler sched_getscheduler sched_get_priority_max "
    "sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall vhangup modify_ldt "
    "pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot sync acct settimeofday mount umount2 "
    "swapon swapoff reboot sethostname setdomainname iopl ioperm create_module init_module delete_module "
    "get_kernel_syms query_module quotactl nfsservctl getpmsg putpmsg afs_syscall tuxcall security gettid "
    "readahead setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr "
    "removexattr lremovexattr fremovexattr tkill time futex sched_setaffinity sched_getaffinity "
    "set_thread_area io_setup io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie "
    "epoll_create epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall "
    "semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete "
    "clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl tgkill utimes "
    "vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify "
    "mq_getsetattr kexec_load waitid add_key request_key keyctl ioprio_set ioprio_get inotify_init "
    "inotify_add_watch inotify_rm_watch migrate_pages openat mkdirat mknodat fchownat futimesat newfstatat "
    "unlinkat renameat linkat symlinkat readlinkat fchmodat faccessat pselect6 ppoll unshare set_robust_list "
    "get_robust_list splice tee sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd "
    "timerfd_create eventfd fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 "
    "epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open recvmmsg "
    "fanotify_init fanotify_mark prlimit64 name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg "
    "setns getcpu process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr renameat2 "
    "seccomp getrandom memfd_create kexec_file_load bpf execveat userfaultfd membarrier mlock2 "
    "copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq uretprobe "
    "uprobe"
)
_AARCH64_LOW = (
    "io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr getxattr lgetxattr "
    "fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr getcwd lookup_dcookie "
    "eventfd2 epoll_create1 epoll_ctl epoll_pwait dup dup3 fcntl inotify_init1 inotify_add_watch "
    "inotify_rm_watch ioctl ioprio_set ioprio_get flock mknodat mkdirat unlinkat symlinkat linkat renameat "
    "umount2 mount pivot_root nfsservctl statfs fstatfs truncate ftruncate fallocate faccessat chdir fchdir "
    "chroot fchmod fchmodat fchownat fchown openat close vhangup pipe2 quotactl getdents64 lseek read write "
    "readv writev pread64 pwrite64 preadv pwritev sendfile pselect6 ppoll signalfd4 vmsplice splice tee "
    "readlinkat newfstatat fstat sync fsync fdatasync sync_file_range timerfd_create timerfd_settime "
    "timerfd_gettime utimensat acct capget capset personality exit exit_group waitid set_tid_address unshare "
    "futex set_robust_list get_robust_list nanosleep getitimer setitimer kexec_load init_module delete_module "
    "timer_create timer_gettime timer_getoverrun timer_settime timer_delete clock_settime clock_gettime "
    "clock_getres clock_nanosleep syslog ptrace sched_setparam sched_setscheduler sched_getscheduler "
    "sched_getparam sched_setaffinity sched_getaffinity sched_yield sched_get_priority_max "
    "sched_get_priority_min sched_rr_get_interval restart_syscall kill tkill tgkill sigaltstack rt_sigsuspend "
    "rt_sigaction rt_sigprocmask rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigreturn setpriority "
    "getpriority reboot setregid setgid setreuid setuid setresuid getresuid setresgid getresgid setfsuid "
    "setfsgid times setpgid getpgid getsid setsid getgroups setgroups uname sethostname setdomainname "
    "getrlimit setrlimit getrusage umask prctl getcpu gettimeofday settimeofday adjtimex getpid getppid "
    "getuid geteuid getgid getegid gettid sysinfo mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify "
    "mq_getsetattr msgget msgctl msgrcv msgsnd semget semctl semtimedop semop shmget shmctl shmat shmdt "
    "socket socketpair bind listen accept connect getsockname getpeername sendto recvfrom setsockopt "
    "getsockopt shutdown sendmsg recvmsg readahead brk munmap mremap add_key request_key keyctl clone execve "
    "mmap fadvise64 swapon swapoff mprotect msync mlock munlock mlockall munlockall mincore madvise "
    "remap_file_pages mbind get_mempolicy set_mempolicy migrate_pages move_pages rt_tgsigqueueinfo "
    "perf_event_open accept4 recvmmsg"
)
_AARCH64_HIGH = (
    "wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at open_by_handle_at clock_adjtime syncfs "
    "setns sendmmsg process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr "
    "renameat2 seccomp getrandom memfd_create bpf execveat userfaultfd membarrier mlock2 copy_file_range "
    "preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq kexec_file_load"
)
_COMMON = (
    "pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount fsopen fsconfig "
    "fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd faccessat2 process_madvise epoll_pwait2 "
    "mount_setattr quotactl_fd landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret "
    "process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack futex_wake "
    "futex_wait futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules mseal "
    "setxattrat getxattrat listxattrat removexattrat open_tree_attr file_getattr file_setattr"
)
TABLES: dict[str, tuple[tuple[int, str], ...]] = {
    "x86_64": ((0, _X86_64), (424, _COMMON)),
    "aarch64": ((0, _AARCH64_LOW), (260, _AARCH64_HIGH), (424, _COMMON)),
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # what seccomp_data.arch holds for native calls
X32_SYSCALL_BIT = 0x40000000  # x86_64's second ABI: the same arch value, numbers with this bit set

# What an ordinary Python and PyTorch process needs, within its own box: files, memory, its own threads and
# children, signals, time, pipes and sockets. Calls on this list act on the caller, its own descriptors or
# processes it may already signal; the uid and capability calls can only give up what the worker no longer has.
ALLOWED: dict[str, str] = {
    "files and folders": (
        "read write readv writev pread64 pwrite64 preadv pwritev pwritev2 open openat openat2 creat close "
        "close_range lseek dup dup2 dup3 fsync fdatasync sync syncfs sync_file_range ftruncate truncate "
        "fallocate stat fstat lstat newfstatat statx statfs fstatfs access faccessat faccessat2 "
        "getdents getdents64 getcwd chdir fchdir mkdir mkdirat rmdir unlink unlinkat rename renameat renameat2 link "
        "linkat symlink symlinkat readlink readlinkat chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat "
        "umask utime utimes utimensat futimesat mknod mknodat sendfile copy_file_range getxattr lgetxattr fgetxattr "
        "listxattr llistxattr flistxattr setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr "
        "setxattrat getxattrat listxattrat removexattrat file_getattr file_setattr memfd_create"
    ),
    "memory (mbind: PyTorch's allocator places its arenas)": (
        "brk mmap munmap mprotect mremap msync mbind get_mempolicy set_mempolicy "
        "set_mempolicy_home_node membarrier pkey_alloc pkey_free pkey_mprotect mseal map_shadow_stack"
    ),
    "processes and threads": (
        "fork vfork execve execveat exit exit_group wait4 waitid kill tkill tgkill getpid getppid gettid getpgid "
        "getpgrp setpgid getsid setsid set_tid_address set_robust_list get_robust_list rseq futex futex_waitv "
        "futex_wake futex_wait futex_requeue arch_prctl prctl seccomp sched_yield sched_getaffinity "
        "sched_setaffinity sched_getparam sched_setparam sched_getscheduler sched_setscheduler "
        "sched_get_priority_max sched_get_priority_min sched_rr_get_interval sched_getattr sched_setattr "
        "getpriority setpriority ioprio_get ioprio_set getrlimit setrlimit prlimit64 getrusage times sysinfo uname "
        "getcpu getrandom capget capset getuid geteuid getgid getegid getresuid getresgid getgroups setuid setgid "
        "setreuid setregid setresuid setresgid setfsuid setfsgid setgroups pidfd_open pidfd_send_signal "
        "restart_syscall uretprobe uprobe"
    ),
    "signals and time": (
        "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigsuspend rt_sigtimedwait rt_sigqueueinfo "
        "rt_tgsigqueueinfo sigaltstack signalfd signalfd4 pause alarm getitimer setitimer timer_create "
        "timer_settime timer_gettime timer_getoverrun timer_delete timerfd_create timerfd_settime timerfd_gettime "
        "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time"
    ),
    "descriptors and sockets (the network namespace keeps sockets in the box)": (
        "pipe pipe2 poll ppoll select pselect6 epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait "
        "epoll_pwait2 eventfd eventfd2 socketpair bind connect listen accept accept4 getsockname getpeername "
        "sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown setsockopt getsockopt"
    ),
}

# Refused with EPERM, by what they would reach.
DENIED: dict[str, str] = {
    (
        "kernel keyrings: keys are kept per uid, outlive the process and were a channel between submissions"
    ): "add_key keyctl request_key",
    "other processes: their memory, descriptors and pages": (
        "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise process_mrelease migrate_pages "
        "move_pages"
    ),
    (
        "namespaces: a new one would give the worker capabilities over it (clone's namespace flags: below)"
    ): "unshare setns",
    "mounts and the root": (
        "mount umount2 pivot_root chroot move_mount open_tree open_tree_attr fsopen fsconfig fsmount fspick "
        "mount_setattr statmount listmount"
    ),
    "SysV and POSIX IPC: named objects that outlive the process": (
        "shmget shmat shmdt shmctl msgget msgsnd msgrcv msgctl semget semop semctl semtimedop mq_open mq_unlink "
        "mq_timedsend mq_timedreceive mq_notify mq_getsetattr"
    ),
    "kernel interfaces with a record of privilege escalations and no use in a worker": (
        "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register io_setup io_destroy "
        "io_submit io_cancel io_getevents io_pgetevents vmsplice splice tee remap_file_pages modify_ldt iopl ioperm "
        "set_thread_area get_thread_area"
    ),
    "file handles, which go around the path walk and the box's masks": (
        "name_to_handle_at open_by_handle_at lookup_dcookie"
    ),
    (
        "watches, locks and page-cache residency: state of a file's inode, which every box binding the file shares, "
        "so another box's opens, reads and locks would reach the caller (fcntl's commands and fadvise: below)"
    ): "inotify_init inotify_init1 inotify_add_watch inotify_rm_watch fanotify_init fanotify_mark flock mincore "
    "cachestat readahead",
    "pinned or secret memory and security-module settings: no use in a worker": (
        "mlock mlock2 mlockall munlock munlockall memfd_secret landlock_create_ruleset landlock_add_rule "
        "landlock_restrict_self lsm_get_self_attr lsm_set_self_attr lsm_list_modules"
    ),
    "the machine's own state": (
        "reboot kexec_load kexec_file_load init_module finit_module delete_module swapon swapoff acct quotactl "
        "quotactl_fd sethostname setdomainname syslog settimeofday clock_settime clock_adjtime adjtimex vhangup "
        "sysfs ustat uselib _sysctl"
    ),
    "numbers no current kernel implements": (
        "create_module get_kernel_syms query_module nfsservctl getpmsg putpmsg afs_syscall tuxcall security vserver "
        "epoll_ctl_old epoll_wait_old"
    ),
}
# Refused with ENOSYS: clone3 passes its flags in memory a filter cannot read, and glibc falls back to clone
FALLBACK = {"clone3"}

CLONE_NEW_FLAGS = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # push input into a terminal: a learner typing into the instructor's shell
# fcntl commands on a file's inode rather than the caller's descriptor: record locks, open file description
# locks, leases and directory notification (F_NOTIFY)
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38
F_SETLEASE, F_GETLEASE, F_NOTIFY = 1024, 1025, 1026
INODE_COMMANDS = (F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_GETLEASE, F_NOTIFY)
POSIX_FADV_NORMAL, POSIX_FADV_RANDOM, POSIX_FADV_SEQUENTIAL = 0, 1, 2  # each sets its own descriptor's readahead
MADV_COLD, MADV_PAGEOUT = 20, 21  # move another box's cached pages out of memory
RWF_NOWAIT = 0x8  # a read that fails rather than wait for the disk: whether the pages were cached


class ArgumentRule:
    """A call allowed for some values of one argument. The filter reads its low 32 bits, which is all the kernel
    reads of the int arguments these rules check. (A plain class: dataclasses would cost every worker's start
    the import of inspect.)"""

    def __init__(
        self,
        argument: int,
        errno: int,
        allowed: tuple[int, ...] = (),
        denied: tuple[int, ...] = (),
        denied_bits: int = 0,
    ) -> None:
        self.argument, self.errno, self.denied_bits = argument, errno, denied_bits
        self.allowed, self.denied = allowed, denied


ARGUMENT_RULES = {
    "clone": ArgumentRule(0, errno.EPERM, denied_bits=CLONE_NEW_FLAGS),  # threads and children, in the same box
    "personality": ArgumentRule(0, errno.EPERM, allowed=(0, 0xFFFFFFFF)),  # Linux's own, or a query: no ASLR off
    "socket": ArgumentRule(0, errno.EAFNOSUPPORT, allowed=(AF_UNIX, AF_INET, AF_INET6)),  # no netlink, packet, alg
    "ioctl": ArgumentRule(1, errno.EPERM, denied=(TIOCSTI, TIOCLINUX)),
    "fcntl": ArgumentRule(1, errno.EPERM, denied=INODE_COMMANDS),  # descriptor flags, duplicates, pipe sizes
    "fadvise64": ArgumentRule(3, errno.EPERM, allowed=(POSIX_FADV_NORMAL, POSIX_FADV_RANDOM, POSIX_FADV_SEQUENTIAL)),
    "madvise": ArgumentRule(2, errno.EPERM, denied=(MADV_COLD, MADV_PAGEOUT)),  # allocators free and hint freely
    # a file that cannot read without waiting says EOPNOTSUPP, and the caller falls back to a waiting read
    "preadv2": ArgumentRule(5, errno.EOPNOTSUPP, denied_bits=RWF_NOWAIT),
}

# classic BPF, and what a seccomp filter returns
LD_ABS_W, JEQ, JGE, JSET, JA, RET = 0x20, 0x15, 0x35, 0x45, 0x05, 0x06
NR_OFFSET, ARCH_OFFSET, ARGS_OFFSET = 0, 4, 16  # struct seccomp_data
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
MAX_INSTRUCTIONS = 4096
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, PR_GET_SECCOMP = 1, 1, 21

Instruction = tuple[int, int, int, int]  # code, jump if true, jump if false, constant
Action = int | str  # a return value, or the name of an argument rule


@functools.cache
def numbers(machine: str) -> dict[str, int]:
    """Every call this architecture's table names, by number (one dict, read only)."""
    return {name: first + offset for first, names in TABLES[machine] for offset, name in enumerate(names.split())}


def allowed_names() -> set[str]:
    return {name for names in ALLOWED.values() for name in names.split()}


def decisions(machine: str) -> dict[int, Action]:
    """What the filter does with each call the table names; a number it does not name gets ENOSYS."""
    allowed = allowed_names()
    out: dict[int, Action] = {}
    for name, number in numbers(machine).items():
        if name in ARGUMENT_RULES:
            out[number] = name
        elif name in allowed:
            out[number] = RET_ALLOW
        else:
            out[number] = RET_ERRNO | (errno.ENOSYS if name in FALLBACK else errno.EPERM)
    return out


def _jump(code: int, constant: int, if_true: int, if_false: int) -> Instruction:
    return (code, if_true, if_false, constant)


def _ret(value: int) -> Instruction:
    return (RET, 0, 0, value)


def _rule_block(rule: ArgumentRule) -> list[Instruction]:
    load = (LD_ABS_W, 0, 0, ARGS_OFFSET + 8 * rule.argument)  # the low half: both architectures are little-endian
    deny, allow = _ret(RET_ERRNO | rule.errno), _ret(RET_ALLOW)
    if rule.denied_bits:
        return [load, _jump(JSET, rule.denied_bits, 0, 1), deny, allow]
    values = rule.allowed or rule.denied
    tests = [_jump(JEQ, value, len(values) - index, 0) for index, value in enumerate(values)]  # a match: 2nd return
    return [load, *tests, *((deny, allow) if rule.allowed else (allow, deny))]


def _search(runs: list[tuple[int, Action]]) -> list[Instruction | tuple[str, str]]:
    """A binary search over runs of numbers sharing one action (each run: its first number and action)."""
    if len(runs) == 1:
        action = runs[0][1]
        return [("rule", action)] if isinstance(action, str) else [_ret(action)]
    middle = len(runs) // 2
    below, above = _search(runs[:middle]), _search(runs[middle:])
    if len(below) <= 255:  # a conditional jump reaches 255 instructions ahead, an unconditional one any distance
        return [_jump(JGE, runs[middle][0], len(below), 0), *below, *above]
    return [_jump(JGE, runs[middle][0], 0, 1), _jump(JA, len(below), 0, 0), *below, *above]


def assemble(machine: str, actions: dict[int, Action], default: int, beyond: int) -> bytes:
    """The program: `actions` by call number, `default` for a number in their range they leave out, `beyond`
    for every number above it."""
    runs: list[tuple[int, Action]] = []
    for number in range(max(actions) + 1):
        action = actions.get(number, default)
        if not runs or runs[-1][1] != action:
            runs.append((number, action))
    if runs[-1][1] != beyond:
        runs.append((max(actions) + 1, beyond))
    head = [
        (LD_ABS_W, 0, 0, ARCH_OFFSET),
        _jump(JEQ, AUDIT_ARCH[machine], 1, 0),
        _ret(RET_KILL_PROCESS),
        (LD_ABS_W, 0, 0, NR_OFFSET),
    ]
    if machine == "x86_64":
        head += [_jump(JGE, X32_SYSCALL_BIT, 0, 1), _ret(RET_ERRNO | errno.ENOSYS)]
    code: list[Instruction | tuple[str, str]] = [*head, *_search(runs)]
    starts: dict[str, int] = {}
    for name in sorted({action for action in actions.values() if isinstance(action, str)}):
        starts[name] = len(code)
        code += _rule_block(ARGUMENT_RULES[name])
    program: list[Instruction] = []
    for index, instruction in enumerate(code):
        if instruction[0] == "rule":
            instruction = _jump(JA, starts[str(instruction[1])] - index - 1, 0, 0)
        program.append(instruction)  # type: ignore[arg-type]
    if len(program) > MAX_INSTRUCTIONS:
        raise ValueError(f"a filter of {len(program)} instructions; the kernel takes {MAX_INSTRUCTIONS}")
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


@functools.cache
def program(machine: str) -> bytes:
    """The worker's filter for `machine`, built once per process (and inherited by a fork)."""
    return assemble(machine, decisions(machine), RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS)


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]  # struct sock_fprog


def kernel_has_seccomp(libc: ctypes.CDLL) -> bool:
    """False only on a kernel built without seccomp, where prctl(PR_GET_SECCOMP) answers EINVAL."""
    return libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 or ctypes.get_errno() != errno.EINVAL


def install(libc: ctypes.CDLL, code: bytes | None = None) -> None:
    """Install the worker's filter (or `code`) on every thread of this process; OSError when it cannot be."""
    machine = os.uname().machine
    if machine not in TABLES:
        raise OSError(errno.ENOSYS, f"no system call table for {machine}")
    code = program(machine) if code is None else code
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _Program(len(code) // 8, ctypes.addressof(buffer))
    result = libc.syscall(
        ctypes.c_long(numbers(machine)["seccomp"]),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")
    if result > 0:
        raise OSError(errno.EBUSY, f"seccomp: thread {result} could not take the filter")


def summary(machine: str) -> str:
    """One line for a report: which filter, by a checksum of its program, and how much it allows."""
    if machine not in TABLES:
        return f"none: no system call table for {machine}; the worker cannot start"
    code = program(machine)
    allowed = sum(1 for action in decisions(machine).values() if action == RET_ALLOW)
    return (
        f"seccomp allow-list {zlib.crc32(code):08x} ({machine}): {allowed} system calls "
        f"allowed, {len(ARGUMENT_RULES)} by argument ({', '.join(sorted(ARGUMENT_RULES))}), every other one "
        "refused (docs/threat-model.md)"
    )
