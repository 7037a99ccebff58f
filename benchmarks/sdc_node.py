#!/usr/bin/env python3
"""healthcheck's silent-data-corruption node program: one deterministic computation per GPU, one checksum each.

Shipped to the node by the ``sdc`` benchmark (it imports nothing from healthcheck) and run there as::

    python3 sdc_node.py --size 2048 --seed 20261123 --iterations 8 --impl auto

Every device computes ``C = tanh(C @ B)`` ``iterations`` times from the same seeded FP32 inputs (made on
the CPU, so every device starts from identical bytes) with deterministic algorithms (no TF32, cuBLAS
workspace pinned), and prints the SHA-256 of its result bytes. Implementations, in order, for ``auto``:
PyTorch with CUDA (all GPUs, in PCI bus order), else a small CUDA C program when ``nvcc`` is present, else a
``skip`` line saying why. ``--impl numpy`` (explicit only, for tests) runs the same computation on the CPU
with single-threaded BLAS as ``--devices`` pseudo devices.

Output (format ``healthcheck-sdc/1``, parsed by ``healthcheck.benchmarks.sdc``; values shell-quoted)::

    # healthcheck-sdc/1 impl=torch size=2048 seed=20261123 iterations=8 versions='torch 2.3.1 cuda 12.1'
    sdc device=0 model='NVIDIA H100 80GB HBM3' bus=0000:18:00.0 checksum=<64 hex> seconds=0.41
    sdc device=3 model='NVIDIA H100 80GB HBM3' bus=0000:5d:00.0 error='CUDA error: an illegal memory access'
    sdc skip reason='neither PyTorch with CUDA nor nvcc on this node'
    # healthcheck-sdc end

``HEALTHCHECK_SDC_INJECT=DEVICE:ELEMENT:BIT`` flips one bit of one device's result before hashing: fault
injection, so the whole check can be proven end to end (tests, drills).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

FORMAT = "healthcheck-sdc/1"
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")         # single-threaded BLAS: the CPU result does not depend on threads
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS (CUDA >= 10.2)
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")       # device N is nvidia-smi's GPU N


class Unavailable(Exception):
    """This implementation cannot run here; the message says why."""


def emit(kind: str, **fields: object) -> None:
    print(" ".join([kind, *(f"{k}={shlex.quote(str(v))}" for k, v in fields.items() if v is not None)]),
          flush=True)


def inject(data: bytearray, device: int) -> bytearray:
    spec = os.environ.get("HEALTHCHECK_SDC_INJECT", "")
    parts = spec.split(":")
    if len(parts) == 3 and all(p.isdigit() for p in parts) and int(parts[0]) == device:
        element, bit = int(parts[1]), int(parts[2])
        index = (element * 4 + bit // 8) % len(data)
        data[index] ^= 1 << (bit % 8)
    return data


def digest(raw: bytes, device: int) -> str:
    return hashlib.sha256(bytes(inject(bytearray(raw), device))).hexdigest()


def run_numpy(args: argparse.Namespace) -> str:
    try:
        import numpy as np
    except ImportError as exc:
        raise Unavailable(f"NumPy not importable: {exc}") from exc
    rng = np.random.default_rng(args.seed)
    a = rng.standard_normal((args.size, args.size), dtype=np.float32)
    b = rng.standard_normal((args.size, args.size), dtype=np.float32) / np.float32(args.size ** 0.5)
    for device in range(args.devices):
        start = time.monotonic()
        c = a.copy()
        for _ in range(args.iterations):
            c = np.tanh(c @ b)
        emit("sdc", device=device, model="cpu-numpy", bus="cpu", checksum=digest(c.tobytes(), device),
             seconds=f"{time.monotonic() - start:.3f}")
    return f"numpy {np.__version__}"


def run_torch(args: argparse.Namespace) -> str:
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"PyTorch not importable ({exc})") from exc
    if not torch.cuda.is_available():
        raise Unavailable(f"PyTorch {torch.__version__} sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(args.seed)
    a = torch.randn(args.size, args.size, generator=gen, dtype=torch.float32)
    b = torch.randn(args.size, args.size, generator=gen, dtype=torch.float32) / args.size ** 0.5
    for device in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(device)
        bus = (f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
               f"{getattr(props, 'pci_device_id', 0):02x}.0") if hasattr(props, "pci_bus_id") else None
        start = time.monotonic()
        try:
            db, c = b.to(device), a.to(device)
            for _ in range(args.iterations):
                c = torch.tanh(c @ db)
            torch.cuda.synchronize(device)
            host = c.cpu().contiguous()
            raw = ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())
        except Exception as exc:  # a GPU that cannot compute is reported by name, the others still run
            emit("sdc", device=device, model=props.name, bus=bus, error=" ".join(str(exc).split())[:300])
            continue
        emit("sdc", device=device, model=props.name, bus=bus, checksum=digest(raw, device),
             seconds=f"{time.monotonic() - start:.3f}")
    return f"torch {torch.__version__} cuda {torch.version.cuda}"


CUDA_SOURCE = r"""
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
__global__ void step(const float* c, const float* b, float* out, int n) {
  int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && j < n) { float s = 0.f; for (int k = 0; k < n; ++k) s = fmaf(c[i * n + k], b[k * n + j], s);
                        out[i * n + j] = tanhf(s); }
}
static float next(uint64_t* x) { *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
                                 return (float)((*x >> 40) / 16777216.0 * 2.0 - 1.0); }
int main(int argc, char** argv) {
  int count = 0; if (cudaGetDeviceCount(&count) != cudaSuccess) { fprintf(stderr, "no CUDA device\n"); return 3; }
  if (argc < 5) { printf("%d\n", count); return 0; }
  int dev = atoi(argv[1]), n = atoi(argv[2]), iters = atoi(argv[4]); uint64_t x = strtoull(argv[3], 0, 10) | 1;
  size_t bytes = (size_t)n * n * sizeof(float); float* a = (float*)malloc(bytes); float* b = (float*)malloc(bytes);
  for (size_t i = 0; i < (size_t)n * n; ++i) a[i] = next(&x);
  for (size_t i = 0; i < (size_t)n * n; ++i) b[i] = next(&x) / sqrtf((float)n);
  cudaDeviceProp p; float *dc, *db, *dn;
  if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return 4;
  cudaMalloc(&dc, bytes); cudaMalloc(&db, bytes); cudaMalloc(&dn, bytes);
  cudaMemcpy(dc, a, bytes, cudaMemcpyHostToDevice); cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
  dim3 t(16, 16), g((n + 15) / 16, (n + 15) / 16);
  for (int it = 0; it < iters; ++it) { step<<<g, t>>>(dc, db, dn, n); float* s = dc; dc = dn; dn = s; }
  cudaError_t e = cudaMemcpy(a, dc, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) { printf("ERROR\t%s\t%04x:%02x:%02x.0\t%s\n", p.name, p.pciDomainID, p.pciBusID,
                                 p.pciDeviceID, cudaGetErrorString(e)); return 0; }
  fwrite(a, 1, bytes, stdout); return 0;
}
"""


def run_cuda(args: argparse.Namespace) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise Unavailable("nvcc not on PATH")
    with tempfile.TemporaryDirectory(prefix="hc-sdc-") as tmp:
        src, exe = os.path.join(tmp, "sdc.cu"), os.path.join(tmp, "sdc")
        with open(src, "w") as handle:
            handle.write(CUDA_SOURCE)
        built = subprocess.run([nvcc, "-O2", "-o", exe, src], capture_output=True, text=True, timeout=600)
        if built.returncode != 0:
            raise Unavailable(f"nvcc failed: {' '.join(built.stderr.split())[:200]}")
        counted = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        if counted.returncode != 0 or not counted.stdout.strip().isdigit():
            raise Unavailable(f"no CUDA device usable: {' '.join(counted.stderr.split())[:200]}")
        for device in range(int(counted.stdout)):
            start = time.monotonic()
            out = subprocess.run([exe, str(device), str(args.size), str(args.seed), str(args.iterations)],
                                 capture_output=True, timeout=args.device_timeout)
            if out.stdout.startswith(b"ERROR\t"):
                _, model, bus, error = out.stdout.decode(errors="replace").rstrip("\n").split("\t", 3)
                emit("sdc", device=device, model=model, bus=bus, error=error)
            elif out.returncode != 0 or len(out.stdout) != args.size * args.size * 4:
                emit("sdc", device=device, model="unknown", error=f"exit {out.returncode}, "
                     f"{len(out.stdout)} bytes: {' '.join(out.stderr.decode(errors='replace').split())[:200]}")
            else:
                emit("sdc", device=device, model=_gpu_name(device), bus=None,
                     checksum=digest(out.stdout, device), seconds=f"{time.monotonic() - start:.3f}")
    return "cuda " + (_nvcc_version(nvcc) or "unknown")


def _gpu_name(device: int) -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    out = subprocess.run([smi, "-i", str(device), "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or "unknown"


def _nvcc_version(nvcc: str) -> str | None:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return next((line.split("release")[-1].strip() for line in out.stdout.splitlines() if "release" in line), None)


IMPLS = {"torch": run_torch, "cuda": run_cuda, "numpy": run_numpy}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--impl", choices=["auto", *IMPLS], default="auto")
    parser.add_argument("--devices", type=int, default=1, help="pseudo devices for --impl numpy")
    parser.add_argument("--device-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    order = ["torch", "cuda"] if args.impl == "auto" else [args.impl]
    reasons = []
    for name in order:
        emit("#", format=FORMAT, impl=name, size=args.size, seed=args.seed, iterations=args.iterations)
        try:
            versions = IMPLS[name](args)
        except Unavailable as exc:
            reasons.append(f"{name}: {exc}")
            continue
        emit("#", versions=versions)
        print("# healthcheck-sdc end", flush=True)
        return 0
    emit("sdc skip", reason="; ".join(reasons) or "no implementation")
    print("# healthcheck-sdc end", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
