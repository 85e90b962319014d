/* An LD_PRELOAD shim for save_order_test: logs, in call order, every write (write, writev, pwrite,
 * pwritev: libstdc++'s filebuf sends large writes through writev), fsync, fdatasync and rename that touches a path
 * containing $CIUIC_IO_TRACE_MATCH, one line each to $CIUIC_IO_TRACE
 * ("write PATH", "fsync PATH", "rename FROM TO"; a descriptor's path from /proc/self/fd), then makes
 * the real call. The log is written with the raw system call, so it never logs itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static void note(const char* what, const char* a, const char* b) {
  const char* match = getenv("CIUIC_IO_TRACE_MATCH");
  const char* log = getenv("CIUIC_IO_TRACE");
  if (!match || !*match || !log || !a) return;
  if (!strstr(a, match) && !(b && strstr(b, match))) return;
  char line[8400];
  const int n = snprintf(line, sizeof line, "%s %s%s%s\n", what, a, b ? " " : "", b ? b : "");
  if (n <= 0) return;
  const int fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)syscall(SYS_write, fd, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
  (void)syscall(SYS_close, fd);
}

static void note_fd(const char* what, int fd) {
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  note(what, path, NULL);
}

ssize_t write(int fd, const void* buf, size_t count) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  if (fd > 2) note_fd("write", fd);
  return real(fd, buf, count);
}

ssize_t writev(int fd, const struct iovec* iov, int n) {
  static ssize_t (*real)(int, const struct iovec*, int);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int))dlsym(RTLD_NEXT, "writev");
  if (fd > 2) note_fd("write", fd);
  return real(fd, iov, n);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t at) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  if (fd > 2) note_fd("write", fd);
  return real(fd, buf, count, at);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t at) {
  static ssize_t (*real)(int, const void*, size_t, off_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
  if (fd > 2) note_fd("write", fd);
  return real(fd, buf, count, at);
}

ssize_t pwritev(int fd, const struct iovec* iov, int n, off_t at) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev");
  if (fd > 2) note_fd("write", fd);
  return real(fd, iov, n, at);
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  note_fd("fsync", fd);
  return real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  note_fd("fsync", fd);
  return real(fd);
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*);
  if (!real) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  note("rename", from, to);
  return real(from, to);
}
