/*
 * A second LD_PRELOAD interposer, loaded after libvitamin_cuda.so: it wraps puts() and finds the
 * real one with dlsym(RTLD_NEXT, "puts"). glibc resolves RTLD_NEXT relative to the object that
 * called dlsym; if the shim's dlsym hid the caller, this lookup would return this very wrapper and
 * recurse until the stack overflows. The test checks that it prints "[next] " and terminates.
 *
 * Build: cc -shared -fPIC -o libnext.so next_interposer.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int puts(const char *s) {
    static int (*real_puts)(const char *);
    if (!real_puts) real_puts = (int (*)(const char *))dlsym(RTLD_NEXT, "puts");
    if (!real_puts || real_puts == puts) return -1;
    fputs("[next] ", stdout);
    return real_puts(s);
}
