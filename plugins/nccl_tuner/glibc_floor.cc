// The glibc floor of libnccl-tuner-ciuic.so. The plugin links libstdc++ and libgcc statically, and
// their objects, built for Debian 12's glibc 2.36, call functions whose newest symbol versions came
// after 2.28, the floor of PyTorch's manylinux_2_28 wheels: pthread_once and friends moved from
// libpthread into libc in 2.34 and were versioned again there, stat and fstat became real functions
// in 2.33, __libc_single_threaded is 2.32, _dl_find_object (the unwinder's FDE lookup) 2.35,
// arc4random 2.36. The link renames each such reference to __wrap_NAME (ld --wrap, listed in
// CMakeLists.txt); the definitions below call the oldest versioned symbol that does the same work,
// which glibc keeps for compatibility, or do it themselves. Nothing here is exported (exports.map).
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

// NAME@GLIBC_2.2.5 under a local name: the x86-64 baseline, present in every glibc since 2002 (in
// libpthread.so.0 before 2.34, which the plugin therefore names as a dependency).
#define CIUIC_OLD(local, name) __asm__(".symver " #local "," #name "@GLIBC_2.2.5")

extern "C" {

int ciuic_old_pthread_once(pthread_once_t*, void (*)());
int ciuic_old_pthread_key_create(pthread_key_t*, void (*)(void*));
int ciuic_old_pthread_key_delete(pthread_key_t);
void* ciuic_old_pthread_getspecific(pthread_key_t);
int ciuic_old_pthread_setspecific(pthread_key_t, const void*);
int ciuic_old_pthread_rwlock_rdlock(pthread_rwlock_t*);
int ciuic_old_pthread_rwlock_wrlock(pthread_rwlock_t*);
int ciuic_old_pthread_rwlock_unlock(pthread_rwlock_t*);
int ciuic_old_xstat(int, const char*, struct stat*);
int ciuic_old_lxstat(int, const char*, struct stat*);
int ciuic_old_fxstat(int, int, struct stat*);
CIUIC_OLD(ciuic_old_pthread_once, pthread_once);
CIUIC_OLD(ciuic_old_pthread_key_create, pthread_key_create);
CIUIC_OLD(ciuic_old_pthread_key_delete, pthread_key_delete);
CIUIC_OLD(ciuic_old_pthread_getspecific, pthread_getspecific);
CIUIC_OLD(ciuic_old_pthread_setspecific, pthread_setspecific);
CIUIC_OLD(ciuic_old_pthread_rwlock_rdlock, pthread_rwlock_rdlock);
CIUIC_OLD(ciuic_old_pthread_rwlock_wrlock, pthread_rwlock_wrlock);
CIUIC_OLD(ciuic_old_pthread_rwlock_unlock, pthread_rwlock_unlock);
CIUIC_OLD(ciuic_old_xstat, __xstat);
CIUIC_OLD(ciuic_old_lxstat, __lxstat);
CIUIC_OLD(ciuic_old_fxstat, __fxstat);

// The stat version the pre-2.33 wrappers passed on x86-64 (_STAT_VER_LINUX).
constexpr int kStatVer = 1;

int __wrap_pthread_once(pthread_once_t* o, void (*f)()) { return ciuic_old_pthread_once(o, f); }
int __wrap_pthread_key_create(pthread_key_t* k, void (*d)(void*)) { return ciuic_old_pthread_key_create(k, d); }
// libstdc++ tests this weak symbol's address to learn whether threads exist; present, so they do.
int __wrap___pthread_key_create(pthread_key_t* k, void (*d)(void*)) { return ciuic_old_pthread_key_create(k, d); }
int __wrap_pthread_key_delete(pthread_key_t k) { return ciuic_old_pthread_key_delete(k); }
void* __wrap_pthread_getspecific(pthread_key_t k) { return ciuic_old_pthread_getspecific(k); }
int __wrap_pthread_setspecific(pthread_key_t k, const void* v) { return ciuic_old_pthread_setspecific(k, v); }
int __wrap_pthread_rwlock_rdlock(pthread_rwlock_t* l) { return ciuic_old_pthread_rwlock_rdlock(l); }
int __wrap_pthread_rwlock_wrlock(pthread_rwlock_t* l) { return ciuic_old_pthread_rwlock_wrlock(l); }
int __wrap_pthread_rwlock_unlock(pthread_rwlock_t* l) { return ciuic_old_pthread_rwlock_unlock(l); }
int __wrap_stat(const char* p, struct stat* s) { return ciuic_old_xstat(kStatVer, p, s); }
int __wrap_lstat(const char* p, struct stat* s) { return ciuic_old_lxstat(kStatVer, p, s); }
int __wrap_fstat(int fd, struct stat* s) { return ciuic_old_fxstat(kStatVer, fd, s); }
int __wrap_fstat64(int fd, struct stat* s) { return ciuic_old_fxstat(kStatVer, fd, s); }  // same struct on x86-64

// libstdc++ skips atomic reference counts while this is nonzero; zero keeps them atomic always (a
// plugin lives in a threaded process anyway).
char __wrap___libc_single_threaded = 0;

// std::random_device's default source. The plugin never draws random numbers; this is for the
// link, and fills the word from the kernel should anything ever ask.
uint32_t __wrap_arc4random() {
  uint32_t v = 0;
  if (syscall(SYS_getrandom, &v, sizeof v, 0) != static_cast<long>(sizeof v)) v = static_cast<uint32_t>(getpid());
  return v;
}

// The unwinder's lookup of the object holding a code address (every throw walks through it):
// dl_iterate_phdr (glibc 2.2.4) finds the loaded object whose segment holds `pc` and its
// PT_GNU_EH_FRAME, which is what _dl_find_object reports on x86-64.
namespace {
struct FindObject {
  uintptr_t pc;
  struct dl_find_object* out;
  bool found;
};
int FindObjectIn(struct dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindObject*>(data);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool holds = false;
  const ElfW(Phdr)* eh = nullptr;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_GNU_EH_FRAME) eh = &ph;
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
    if (start < lo) lo = start;
    if (end > hi) hi = end;
    if (f->pc >= start && f->pc < end) holds = true;
  }
  if (!holds) return 0;
  std::memset(f->out, 0, sizeof *f->out);
  f->out->dlfo_map_start = reinterpret_cast<void*>(lo);
  f->out->dlfo_map_end = reinterpret_cast<void*>(hi);
  f->out->dlfo_eh_frame = eh ? reinterpret_cast<void*>(info->dlpi_addr + eh->p_vaddr) : nullptr;
  f->found = true;
  return 1;
}
}  // namespace

int __wrap__dl_find_object(void* pc, struct dl_find_object* result) {
  FindObject f{reinterpret_cast<uintptr_t>(pc), result, false};
  dl_iterate_phdr(FindObjectIn, &f);
  return f.found ? 0 : -1;
}

}  // extern "C"
