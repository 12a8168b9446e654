package sandbox

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/landlock.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

// spawn_req is one command to start: filled by the server, read by the
// child, which writes back only step and err.
struct spawn_req {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *dir;
	int fds[3];
	int ruleset;
	int ptys;
	unsigned long long pts_access, ptmx_access; // the rules for its own terminals
	sigset_t mask; // the server thread's own, restored before exec
	volatile int step, err; // what failed, set by the child
};

enum { STEP_DEVPTS = 1, STEP_PTMX, STEP_SETSID, STEP_CHDIR, STEP_DUP, STEP_CAPS, STEP_NNP, STEP_LANDLOCK, STEP_CLOSE, STEP_EXEC };

#define FAIL(s) do { r->step = (s); r->err = errno; _exit(127); } while (0)

// allow adds a rule for path to the ruleset; a failure only leaves the
// command without that access.
static void allow(int ruleset, const char *path, unsigned long long access) {
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return;
	struct landlock_path_beneath_attr attr = { .allowed_access = access, .parent_fd = fd };
	(void)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
	close(fd);
}

// spawn_child runs in the new PID and mount namespaces, on its own stack
// and in the server's memory (CLONE_VM): only system calls, no allocation,
// until it executes the command.
static int spawn_child(void *arg) {
	struct spawn_req *r = arg;
	if (r->ptys) {
		if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") != 0)
			FAIL(STEP_DEVPTS);
		if (mount("/dev/pts/ptmx", "/dev/ptmx", NULL, MS_BIND, NULL) != 0)
			FAIL(STEP_PTMX);
		// Its terminals are in a devpts no other process has: a rule for
		// them, in a ruleset other commands share, reaches nothing else.
		allow(r->ruleset, "/dev/ptmx", r->ptmx_access);
		allow(r->ruleset, "/dev/pts", r->pts_access);
	}
	(void)mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	if (setsid() < 0)
		FAIL(STEP_SETSID);
	if (chdir(r->dir) != 0)
		FAIL(STEP_CHDIR);
	for (int i = 0; i < 3; i++)
		if (dup2(r->fds[i], i) < 0)
			FAIL(STEP_DUP);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
		FAIL(STEP_CAPS);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		FAIL(STEP_NNP);
	if (syscall(SYS_landlock_restrict_self, r->ruleset, 0) != 0)
		FAIL(STEP_LANDLOCK);
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
		FAIL(STEP_CLOSE);
	// The server's handlers are Go's, in memory this child shares: back to
	// the defaults before any signal can be delivered.
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++) {
		struct sigaction old;
		if (sigaction(s, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			(void)sigaction(s, &dfl, NULL);
	}
	sigprocmask(SIG_SETMASK, &r->mask, NULL);
	execve(r->path, r->argv, r->envp);
	FAIL(STEP_EXEC);
	return 127;
}

// spawn starts r's command as init of new PID and mount namespaces and
// returns its pid (-1: see errno, or r->step when the child failed), with
// a pidfd of it in *pidfd. The calling thread waits until the command has
// started (CLONE_VFORK): no copy of the server's memory is made.
static int spawn(struct spawn_req *r, int *pidfd) {
	enum { STACK = 64 << 10 };
	char *stack = malloc(STACK);
	if (stack == NULL)
		return -1;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &r->mask);
	r->step = 0;
	r->err = 0;
	*pidfd = -1;
	int pid = clone(spawn_child, stack + STACK, CLONE_VM | CLONE_VFORK | CLONE_NEWPID | CLONE_NEWNS | CLONE_PIDFD | SIGCHLD, r, pidfd);
	int saved = errno;
	pthread_sigmask(SIG_SETMASK, &r->mask, NULL);
	free(stack);
	errno = saved;
	return pid;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The helper server (server.go) starts each command with spawn: Go cannot
// run code between fork and exec, and each command needs some there (its
// own /proc and terminals, its own session and Landlock domain). Everything
// that costs more (the user and network namespaces, the mounts that hide
// paths, the ruleset) is made once, in the server.

// spawnSteps names what the child was doing when it failed.
var spawnSteps = map[C.int]string{
	C.STEP_DEVPTS: "mount its own /dev/pts", C.STEP_PTMX: "bind its /dev/ptmx", C.STEP_SETSID: "setsid",
	C.STEP_CHDIR: "chdir", C.STEP_DUP: "dup2", C.STEP_CAPS: "drop capabilities", C.STEP_NNP: "no_new_privs",
	C.STEP_LANDLOCK: "landlock_restrict_self", C.STEP_CLOSE: "close inherited descriptors",
}

// spawned is a command spawn started.
type spawned struct {
	pid, pidfd int
}

// spawn starts path with argv and env in dir, its stdin, stdout and stderr
// fds, confined by the Landlock ruleset; ptys: it gets terminals of its
// own, which it adds to the ruleset before it restricts itself.
func spawn(path string, argv, env []string, dir string, fds [3]int, ruleset int, ptys bool) (spawned, error) {
	var pinned []unsafe.Pointer
	cstr := func(s string) *C.char {
		p := C.CString(s)
		pinned = append(pinned, unsafe.Pointer(p))
		return p
	}
	list := func(ss []string) **C.char {
		arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		pinned = append(pinned, unsafe.Pointer(arr))
		items := unsafe.Slice(arr, len(ss)+1)
		for i, s := range ss {
			items[i] = cstr(s)
		}
		return arr
	}
	req := (*C.struct_spawn_req)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_spawn_req{}))))
	pinned = append(pinned, unsafe.Pointer(req))
	defer func() {
		for _, p := range pinned {
			C.free(p)
		}
	}()
	req.path, req.argv, req.envp, req.dir = cstr(path), list(argv), list(env), cstr(dir)
	for i, fd := range fds {
		req.fds[i] = C.int(fd)
	}
	req.ruleset = C.int(ruleset)
	if ptys {
		req.ptys = 1
		dir, file := ptyAccess()
		req.pts_access, req.ptmx_access = C.ulonglong(dir), C.ulonglong(file)
	}
	var pidfd C.int
	pid, err := C.spawn(req, &pidfd)
	if pid < 0 {
		return spawned{}, fmt.Errorf("%sstart a command in new PID and mount namespaces: %v", helperFailed, err)
	}
	if req.step == 0 {
		return spawned{pid: int(pid), pidfd: int(pidfd)}, nil
	}
	// The child failed before it became the command: reap it.
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	_ = unix.Close(int(pidfd))
	errno := unix.Errno(req.err)
	if req.step == C.STEP_EXEC {
		return spawned{}, fmt.Errorf("fork/exec %s: %w", path, errno)
	}
	if req.step == C.STEP_CHDIR {
		return spawned{}, fmt.Errorf("chdir %s: %w", dir, errno)
	}
	return spawned{}, fmt.Errorf("%s%s: %v", helperFailed, spawnSteps[req.step], errno)
}
