#!/usr/bin/env python3
"""healthcheck's GPU performance micro-tests node program: per GPU, a GEMM's throughput, a device-local copy's
memory bandwidth, host<->device and GPU->GPU copy bandwidth, each timed with CUDA events.

Shipped to the node by the ``gpuperf`` benchmark and run by ``healthcheck gate`` (it imports nothing from
healthcheck)::

    python3 gpuperf_node.py --tests gemm,hbm,h2d,d2h,p2p --dtype bf16 --gemm-n 8192 --copy-mib 1024 --impl auto

What is measured, per GPU in PCI bus order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``: device N is nvidia-smi's GPU N):

- ``gemm_tflops``: ``2 n^3 iterations / seconds`` of ``C = A @ B`` (n x n, ``--dtype`` fp16, bf16, fp32 or tf32),
  after warm-up iterations: dense matrix throughput, comparable with a datasheet's dense Tensor Core figure;
- ``hbm_gbps``: ``2 bytes iterations / seconds`` of a copy inside the GPU's memory (each byte is read and
  written once, so this is the memory traffic, comparable with the datasheet's memory bandwidth);
- ``h2d_gbps`` / ``d2h_gbps``: ``bytes iterations / seconds`` of copies from / to pinned host memory;
- ``p2p_gbps``: ``bytes iterations / seconds`` of a copy from this GPU to the next one (``p2p_peer``, a ring:
  GPU i to GPU i+1 mod n), with peer access enabled when the pair supports it.

Implementations, in order, for ``auto``: PyTorch with CUDA, else CuPy, else a small CUDA C program built with
``nvcc`` and linked with cuBLAS (it ships with the CUDA toolkit), else a ``skip`` line saying why. ``--impl numpy``
(explicit only, for tests) runs the same steps on the CPU as ``--devices`` pseudo devices.

Output (format ``healthcheck-gpuperf/1``, parsed by ``healthcheck.benchmarks.gpuperf``; values shell-quoted)::

    # format=healthcheck-gpuperf/1 impl=torch tests=gemm,hbm,h2d,d2h,p2p dtype=bf16 gemm_n=8192 ...
    # versions='torch 2.3.1 cuda 12.1'
    gpuperf device=0 model='NVIDIA H100 80GB HBM3' bus=0000:18:00.0 gemm_tflops=702.31 hbm_gbps=2974.5 ...
    gpuperf device=3 model='NVIDIA H100 80GB HBM3' bus=0000:5d:00.0 error='CUDA error: an illegal memory access'
    gpuperf skip reason='neither PyTorch nor CuPy with CUDA nor nvcc on this node'
    # healthcheck-gpuperf end
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

FORMAT = "healthcheck-gpuperf/1"
TESTS = ("gemm", "hbm", "h2d", "d2h", "p2p")
DTYPES = ("fp16", "bf16", "fp32", "tf32")
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


class Unavailable(Exception):
    """This implementation cannot run here; the message says why."""


def emit(kind: str, **fields: object) -> None:
    print(" ".join([kind, *(f"{k}={shlex.quote(str(v))}" for k, v in fields.items() if v is not None)]),
          flush=True)


def rate(amount: float, seconds: float) -> str | None:
    return f"{amount / seconds:.2f}" if seconds > 0 else None


def run_torch(args: argparse.Namespace) -> str:
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"PyTorch not importable ({exc})") from exc
    if not torch.cuda.is_available():
        raise Unavailable(f"PyTorch {torch.__version__} sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    count = torch.cuda.device_count()
    for device in range(count):
        props = torch.cuda.get_device_properties(device)
        start = time.monotonic()
        try:
            with torch.cuda.device(device):
                values = _torch_device(torch, args, device, count)
        except Exception as exc:  # a GPU that cannot run the test is reported by name, the others still run
            emit("gpuperf", device=device, model=props.name, bus=_torch_bus(props),
                 error=" ".join(str(exc).split())[:300])
            continue
        finally:
            torch.cuda.empty_cache()
        emit("gpuperf", device=device, model=props.name, bus=_torch_bus(props), **values,
             seconds=f"{time.monotonic() - start:.3f}")
    return f"torch {torch.__version__} cuda {torch.version.cuda}"


def _torch_device(torch, args, device, count) -> dict:  # type: ignore[no-untyped-def]
    def timed(fn: Callable[[], object], iterations: int) -> float:
        for _ in range(args.warmup):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    out: dict[str, object] = {}
    if "gemm" in args.tests:
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
                 "tf32": torch.float32}[args.dtype]
        n = args.gemm_n
        a = torch.full((n, n), 0.01, dtype=dtype, device=device)
        b = torch.full((n, n), 0.01, dtype=dtype, device=device)
        out["gemm_tflops"] = rate(2.0 * n ** 3 * args.gemm_iters / 1e12, timed(lambda: a @ b, args.gemm_iters))
        del a, b
    if not set(args.tests) & {"hbm", "h2d", "d2h", "p2p"}:
        return out
    nbytes = args.copy_mib << 20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    if "hbm" in args.tests:
        out["hbm_gbps"] = rate(2.0 * nbytes * args.copy_iters / 1e9, timed(lambda: dst.copy_(src), args.copy_iters))
    if "h2d" in args.tests:
        out["h2d_gbps"] = rate(nbytes * args.copy_iters / 1e9,
                               timed(lambda: dst.copy_(host, non_blocking=True), args.copy_iters))
    if "d2h" in args.tests:
        out["d2h_gbps"] = rate(nbytes * args.copy_iters / 1e9,
                               timed(lambda: host.copy_(src, non_blocking=True), args.copy_iters))
    if "p2p" in args.tests and count > 1:
        peer = (device + 1) % count
        remote = torch.empty(nbytes, dtype=torch.uint8, device=peer)
        out["p2p_peer"] = peer
        out["p2p_gbps"] = rate(nbytes * args.copy_iters / 1e9,
                               timed(lambda: remote.copy_(src, non_blocking=True), args.copy_iters))
    return out


def _torch_bus(props: object) -> str | None:
    if not hasattr(props, "pci_bus_id"):
        return None
    return (f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
            f"{getattr(props, 'pci_device_id', 0):02x}.0")


def run_cupy(args: argparse.Namespace) -> str:
    if args.dtype == "bf16":
        raise Unavailable("CuPy has no bfloat16 arrays")
    if args.dtype == "tf32":
        os.environ.setdefault("CUPY_TF32", "1")
    try:
        import cupy
    except ImportError as exc:
        raise Unavailable(f"CuPy not importable ({exc})") from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise Unavailable(f"CuPy sees no CUDA device ({exc})") from exc
    dtype = {"fp16": cupy.float16, "fp32": cupy.float32, "tf32": cupy.float32}[args.dtype]
    nbytes = args.copy_mib << 20

    def timed(fn: Callable[[], object], iterations: int) -> float:
        for _ in range(args.warmup):
            fn()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(iterations):
            fn()
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1000.0

    for device in range(count):
        props = cupy.cuda.runtime.getDeviceProperties(device)
        name = props["name"].decode(errors="replace") if isinstance(props["name"], bytes) else str(props["name"])
        bus = f"{props.get('pciDomainID', 0):04x}:{props.get('pciBusID', 0):02x}:{props.get('pciDeviceID', 0):02x}.0"
        start = time.monotonic()
        try:
            with cupy.cuda.Device(device):
                values = _cupy_device(cupy, args, device, count, dtype, nbytes, timed)
        except Exception as exc:
            emit("gpuperf", device=device, model=name, bus=bus, error=" ".join(str(exc).split())[:300])
            continue
        emit("gpuperf", device=device, model=name, bus=bus, **values, seconds=f"{time.monotonic() - start:.3f}")
    return f"cupy {cupy.__version__} cuda {cupy.cuda.runtime.runtimeGetVersion()}"


def _cupy_device(cupy, args, device, count, dtype, nbytes, timed) -> dict:  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}
    if "gemm" in args.tests:
        n = args.gemm_n
        a = cupy.full((n, n), 0.01, dtype=dtype)
        b = cupy.full((n, n), 0.01, dtype=dtype)
        out["gemm_tflops"] = rate(2.0 * n ** 3 * args.gemm_iters / 1e12, timed(lambda: a @ b, args.gemm_iters))
    if not set(args.tests) & {"hbm", "h2d", "d2h", "p2p"}:
        return out
    import cupyx
    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    host = cupyx.empty_pinned(nbytes, dtype=cupy.uint8)
    stream = cupy.cuda.get_current_stream()
    if "hbm" in args.tests:
        out["hbm_gbps"] = rate(2.0 * nbytes * args.copy_iters / 1e9, timed(lambda: dst.__setitem__(
            slice(None), src), args.copy_iters))
    if "h2d" in args.tests:
        out["h2d_gbps"] = rate(nbytes * args.copy_iters / 1e9, timed(lambda: dst.set(host, stream), args.copy_iters))
    if "d2h" in args.tests:
        out["d2h_gbps"] = rate(nbytes * args.copy_iters / 1e9,
                               timed(lambda: src.get(stream, out=host), args.copy_iters))
    if "p2p" in args.tests and count > 1:
        peer = (device + 1) % count
        with cupy.cuda.Device(peer):
            remote = cupy.empty(nbytes, dtype=cupy.uint8)
        out["p2p_peer"] = peer
        out["p2p_gbps"] = rate(nbytes * args.copy_iters / 1e9, timed(lambda: cupy.cuda.runtime.memcpyPeerAsync(
            remote.data.ptr, peer, src.data.ptr, device, nbytes, stream.ptr), args.copy_iters))
    return out


CUDA_SOURCE = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <cublas_v2.h>
// gpuperf                         -> prints the device count
// gpuperf DEV DTYPE N ITERS MIB COPY_ITERS WARMUP TESTS -> a line of key=value fields (tab-separated),
//                                                          then an ERROR<TAB>message line if a call failed
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("\nERROR\t%s: %s\n", #x, cudaGetErrorString(e_)); return 0; } } while (0)
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
  printf("\nERROR\t%s: cuBLAS status %d\n", #x, (int)s_); return 0; } } while (0)
static float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0; cudaEventElapsedTime(&ms, a, b); return ms / 1000.f;
}
int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) { fprintf(stderr, "no CUDA device\n"); return 3; }
  if (argc < 9) { printf("%d\n", count); return 0; }
  int dev = atoi(argv[1]); const char* dt = argv[2]; int n = atoi(argv[3]), iters = atoi(argv[4]);
  size_t bytes = (size_t)atol(argv[5]) << 20; int citers = atoi(argv[6]), warm = atoi(argv[7]);
  const char* tests = argv[8];
  cudaDeviceProp p; CK(cudaSetDevice(dev)); CK(cudaGetDeviceProperties(&p, dev));
  printf("model=%s\tbus=%04x:%02x:%02x.0", p.name, p.pciDomainID, p.pciBusID, p.pciDeviceID);
  cudaEvent_t t0, t1; CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
  if (strstr(tests, "gemm")) {
    cudaDataType_t ty = CUDA_R_32F; size_t es = 4; cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    if (!strcmp(dt, "fp16")) { ty = CUDA_R_16F; es = 2; } else if (!strcmp(dt, "bf16")) { ty = CUDA_R_16BF; es = 2; }
    else if (!strcmp(dt, "tf32")) { ct = CUBLAS_COMPUTE_32F_FAST_TF32; }
    void *A, *B, *C; size_t mb = (size_t)n * n * es;
    CK(cudaMalloc(&A, mb)); CK(cudaMalloc(&B, mb)); CK(cudaMalloc(&C, mb));
    CK(cudaMemset(A, 0x3c, mb)); CK(cudaMemset(B, 0x3c, mb));
    cublasHandle_t h; CB(cublasCreate(&h)); float one = 1.f, zero = 0.f;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) CK(cudaEventRecord(t0));
      CB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, ty, n, B, ty, n, &zero, C, ty, n, ct,
                      CUBLAS_GEMM_DEFAULT));
    }
    CK(cudaEventRecord(t1)); CK(cudaEventSynchronize(t1));
    printf("\tgemm_tflops=%.2f", 2.0 * n * (double)n * n * iters / elapsed(t0, t1) / 1e12);
    cublasDestroy(h); cudaFree(A); cudaFree(B); cudaFree(C);
  }
  void *s = 0, *d = 0, *host = 0;
  CK(cudaMalloc(&s, bytes)); CK(cudaMalloc(&d, bytes)); CK(cudaMallocHost(&host, bytes));
  const char* names[3] = {"hbm", "h2d", "d2h"};
  for (int k = 0; k < 3; ++k) {
    if (!strstr(tests, names[k])) continue;
    void* dst = k == 2 ? host : d; const void* src = k == 1 ? host : s;
    cudaMemcpyKind kind = k == 0 ? cudaMemcpyDeviceToDevice : k == 1 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    for (int i = 0; i < warm + citers; ++i) {
      if (i == warm) CK(cudaEventRecord(t0));
      CK(cudaMemcpyAsync(dst, src, bytes, kind, 0));
    }
    CK(cudaEventRecord(t1)); CK(cudaEventSynchronize(t1));
    printf("\t%s_gbps=%.2f", names[k], (k == 0 ? 2.0 : 1.0) * bytes * citers / elapsed(t0, t1) / 1e9);
  }
  if (strstr(tests, "p2p") && count > 1) {
    int peer = (dev + 1) % count, can = 0; void* r = 0;
    CK(cudaDeviceCanAccessPeer(&can, dev, peer));
    if (can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError(); else CK(e);
    }
    CK(cudaSetDevice(peer)); CK(cudaMalloc(&r, bytes)); CK(cudaSetDevice(dev));
    for (int i = 0; i < warm + citers; ++i) {
      if (i == warm) CK(cudaEventRecord(t0));
      CK(cudaMemcpyPeerAsync(r, peer, s, dev, bytes, 0));
    }
    CK(cudaEventRecord(t1)); CK(cudaEventSynchronize(t1));
    printf("\tp2p_peer=%d\tp2p_gbps=%.2f", peer, 1.0 * bytes * citers / elapsed(t0, t1) / 1e9);
  }
  printf("\n");
  return 0;
}
"""


def run_cuda(args: argparse.Namespace) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise Unavailable("nvcc not on PATH")
    with tempfile.TemporaryDirectory(prefix="hc-gpuperf-") as tmp:
        src, exe = os.path.join(tmp, "gpuperf.cu"), os.path.join(tmp, "gpuperf")
        with open(src, "w") as handle:
            handle.write(CUDA_SOURCE)
        built = subprocess.run([nvcc, "-O2", "-o", exe, src, "-lcublas"], capture_output=True, text=True,
                               timeout=600)
        if built.returncode != 0:
            raise Unavailable(f"nvcc failed: {' '.join(built.stderr.split())[:200]}")
        counted = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        if counted.returncode != 0 or not counted.stdout.strip().isdigit():
            raise Unavailable(f"no CUDA device usable: {' '.join(counted.stderr.split())[:200]}")
        for device in range(int(counted.stdout)):
            start = time.monotonic()
            out = subprocess.run([exe, str(device), args.dtype, str(args.gemm_n), str(args.gemm_iters),
                                  str(args.copy_mib), str(args.copy_iters), str(args.warmup), ",".join(args.tests)],
                                 capture_output=True, text=True, timeout=args.device_timeout)
            first = out.stdout.splitlines()[0] if out.stdout else ""
            fields = dict(f.split("=", 1) for f in first.split("\t") if "=" in f)
            error = next((line.split("\t", 1)[1] for line in out.stdout.splitlines() if line.startswith("ERROR\t")),
                         None)
            if error is None and out.returncode != 0:
                error = f"exit {out.returncode}: {' '.join(out.stderr.split())[:200]}"
            model, bus = fields.pop("model", "unknown"), fields.pop("bus", None)
            if error is not None:
                emit("gpuperf", device=device, model=model, bus=bus, error=error)
            else:
                emit("gpuperf", device=device, model=model, bus=bus, **fields,
                     seconds=f"{time.monotonic() - start:.3f}")
    return "cuda " + (_nvcc_version(nvcc) or "unknown")


def _nvcc_version(nvcc: str) -> str | None:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return next((line.split("release")[-1].strip() for line in out.stdout.splitlines() if "release" in line), None)


def run_numpy(args: argparse.Namespace) -> str:
    try:
        import numpy as np
    except ImportError as exc:
        raise Unavailable(f"NumPy not importable: {exc}") from exc
    n = min(args.gemm_n, 256)
    nbytes = min(args.copy_mib, 16) << 20
    for device in range(args.devices):
        start = time.monotonic()
        values: dict[str, object] = {}
        if "gemm" in args.tests:
            a = np.full((n, n), 0.01, dtype=np.float32)
            t = time.perf_counter()
            for _ in range(args.gemm_iters):
                a @ a
            values["gemm_tflops"] = rate(2.0 * n ** 3 * args.gemm_iters / 1e12, time.perf_counter() - t)
        src, dst = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
        for test, factor in (("hbm", 2.0), ("h2d", 1.0), ("d2h", 1.0), ("p2p", 1.0)):
            if test in args.tests and not (test == "p2p" and args.devices < 2):
                t = time.perf_counter()
                for _ in range(args.copy_iters):
                    np.copyto(dst, src)
                values[f"{test}_gbps"] = rate(factor * nbytes * args.copy_iters / 1e9, time.perf_counter() - t)
                if test == "p2p":
                    values["p2p_peer"] = (device + 1) % args.devices
        emit("gpuperf", device=device, model="cpu-numpy", bus="cpu", **values,
             seconds=f"{time.monotonic() - start:.3f}")
    return f"numpy {np.__version__}"


IMPLS = {"torch": run_torch, "cupy": run_cupy, "cuda": run_cuda, "numpy": run_numpy}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tests", default=",".join(TESTS), help=f"comma-separated subset of {','.join(TESTS)}")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--gemm-n", type=int, default=8192)
    parser.add_argument("--gemm-iters", type=int, default=50)
    parser.add_argument("--copy-mib", type=int, default=1024)
    parser.add_argument("--copy-iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--impl", choices=["auto", *IMPLS], default="auto")
    parser.add_argument("--devices", type=int, default=1, help="pseudo devices for --impl numpy")
    parser.add_argument("--device-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    args.tests = [t for t in args.tests.split(",") if t]
    unknown = sorted(set(args.tests) - set(TESTS))
    if unknown:
        parser.error(f"unknown tests {', '.join(unknown)} (known: {', '.join(TESTS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    order = ["torch", "cupy", "cuda"] if args.impl == "auto" else [args.impl]
    reasons = []
    for name in order:
        emit("#", format=FORMAT, impl=name, tests=",".join(args.tests), dtype=args.dtype, gemm_n=args.gemm_n,
             gemm_iters=args.gemm_iters, copy_mib=args.copy_mib, copy_iters=args.copy_iters)
        try:
            versions = IMPLS[name](args)
        except Unavailable as exc:
            reasons.append(f"{name}: {exc}")
            continue
        emit("#", versions=versions)
        print("# healthcheck-gpuperf end", flush=True)
        return 0
    emit("gpuperf skip", reason="; ".join(reasons) or "no implementation")
    print("# healthcheck-gpuperf end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
