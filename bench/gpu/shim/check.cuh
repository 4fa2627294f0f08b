// Error checks shared by the driver-API benchmark programs: CK for CUresult, RK for cudaError_t.
// Either prints the failing call and line and exits with status 1.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                           \
    do {                                                                                \
        CUresult r_ = (x);                                                              \
        if (r_ != CUDA_SUCCESS) {                                                       \
            std::fprintf(stderr, "FAILED %s -> %d (line %d)\n", #x, (int)r_, __LINE__); \
            std::exit(1);                                                               \
        }                                                                               \
    } while (0)
#define RK(x)                                                                                        \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) {                                                                     \
            std::fprintf(stderr, "FAILED %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(1);                                                                            \
        }                                                                                            \
    } while (0)
