/* A minimal stand-in for a ROCm >= 6.2 runtime, for the interposer's hipGetProcAddress test: it
 * exports hipStreamCreate (hooked by the interposer), hipStreamQuery_spt (hooked; the answer for
 * hipStreamQuery with flag 1), hipGetDeviceCount (not hooked) and hipGetProcAddress, which answers with the runtime's own definitions (hidden aliases, so the
 * answer is this library's address even when a preloaded library interposes the exported name,
 * as the real runtime's internal table does). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int hipError_t;

__attribute__((visibility("hidden"))) hipError_t rt_stream_create(void **out) {
    if (out == NULL) return 1; /* hipErrorInvalidValue */
    *out = (void *)0x5eed;
    return 0;
}
__attribute__((visibility("hidden"))) hipError_t rt_device_count(int *n) {
    if (n == NULL) return 1;
    *n = 1;
    return 0;
}
__attribute__((visibility("hidden"))) hipError_t rt_stream_query_spt(void *stream) {
    (void)stream;
    return 0;
}
hipError_t hipStreamCreate(void **out) __attribute__((alias("rt_stream_create")));
hipError_t hipStreamQuery_spt(void *stream) __attribute__((alias("rt_stream_query_spt")));
hipError_t hipGetDeviceCount(int *n) __attribute__((alias("rt_device_count")));

hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)version;
    if (symbol == NULL || pfn == NULL) return 1;
    void *f = NULL;
    if (strcmp(symbol, "hipStreamCreate") == 0) f = (void *)rt_stream_create;
    if (strcmp(symbol, "hipGetDeviceCount") == 0) f = (void *)rt_device_count;
    /* Flag 1 here stands for a per-thread-default-stream lookup: the base name's _spt variant. */
    if (strcmp(symbol, "hipStreamQuery") == 0 && flags == 1) f = (void *)rt_stream_query_spt;
    *pfn = f;
    if (status != NULL) *status = f != NULL ? 0 : 1; /* HIP_GET_PROC_ADDRESS_(SUCCESS|SYMBOL_NOT_FOUND) */
    return f != NULL ? 0 : 1;
}
