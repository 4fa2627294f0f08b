/* Fetches hipStreamCreate and hipGetDeviceCount through hipGetProcAddress and says whose
 * functions it got: "runtime" (the runtime library's own) or "interposer" (the first definition
 * in the process, the preloaded interposer's when there is one), then calls both. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

typedef int hipError_t;
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, int *status);

static const char *whose(void *f, const char *name, void *runtime) {
    void *own = dlsym(runtime, name);
    void *first = dlsym(RTLD_DEFAULT, name);
    if (f == own && f != first) return "runtime";
    if (f == first && f != own) return "interposer";
    return f == own ? "runtime(not interposed)" : "unknown";
}

int main(void) {
    void *runtime = dlopen("libprocaddr_rt.so", RTLD_NOW | RTLD_NOLOAD);
    if (runtime == NULL) { printf("error no runtime\n"); return 1; }
    void *create = NULL, *count = NULL;
    int st = -1;
    hipError_t a = hipGetProcAddress("hipStreamCreate", &create, 602, 0, &st);
    hipError_t b = hipGetProcAddress("hipGetDeviceCount", &count, 602, 0, NULL);
    void *query = NULL;
    hipError_t g = hipGetProcAddress("hipStreamQuery", &query, 602, 1, NULL);
    hipError_t h = query != NULL ? ((hipError_t (*)(void *))query)(NULL) : -1;
    void *none = NULL;
    hipError_t c = hipGetProcAddress("hipNoSuchFunction", &none, 602, 0, NULL);
    void *stream = NULL;
    int n = 0;
    hipError_t d = ((hipError_t (*)(void **))create)(&stream);
    hipError_t e = ((hipError_t (*)(int *))count)(&n);
    printf("results= create=%s count=%s query_spt=%s spt_codes=%d,%d ", whose(create, "hipStreamCreate", runtime),
           whose(count, "hipGetDeviceCount", runtime), whose(query, "hipStreamQuery_spt", runtime), g, h);
    printf("codes=%d,%d,%d,%d,%d status=%d stream=%p devices=%d none=%p\n",
           a, b, c, d, e,
           st, stream, n, none);
    return 0;
}
