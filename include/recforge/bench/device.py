"""Where the benchmark runs: the device batches are copied to, the host, and its CPUs.

Batches are copied to ``mx.gpu()`` when MXNet sees a GPU and one tiny kernel runs there
(``gpu_smoke_test``); otherwise the result says plainly that it ran on CPU and the GPU
memory peak is ``null``.

MXNet 1.9.1 silently caps ``preprocess_threads`` at ``max(nprocs // 2 - 1, 1)``
(``ImageRecordIOParser2::Init``); ``thread_cap`` predicts it from ``nprocs``, the CPUs this
process may run on.
"""

from __future__ import annotations

import logging
import os

from recforge.bench.records import LoaderBenchError

log = logging.getLogger(__name__)


def nprocs() -> int:
    """CPUs this process may run on: what libgomp's ``omp_get_num_procs`` reports."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_cap(procs: int | None = None) -> int:
    """MXNet 1.9.1's silent cap on ``preprocess_threads``: ``max(nprocs/2 - 1, 1)``."""
    procs = nprocs() if procs is None else procs
    return max(procs // 2 - 1, 1)


def first_mxnet_message(exc: Exception) -> str:
    """MXNet errors carry a C++ traceback; keep the ``MXNetError: ...`` line."""
    text = str(exc)
    for line in text.splitlines():
        if "Check failed" in line or line.startswith("MXNetError"):
            return line.split("MXNetError: ", 1)[-1].strip()
    return text.strip().splitlines()[0] if text.strip() else repr(exc)


def resolve_device(requested: str, gpu_id: int = 0) -> dict:
    """Which device batches are copied to, with a sentence saying why."""
    import mxnet as mx

    features = mx.runtime.Features()
    cuda_build = features.is_enabled("CUDA")
    try:
        n = mx.context.num_gpus()
    except Exception as exc:  # a CUDA build without a driver raises here
        log.warning("mx.context.num_gpus() failed: %s", first_mxnet_message(exc))
        n = 0
    info = {"requested": requested, "num_gpus": n, "mxnet_cuda_build": cuda_build,
            "gpu_id": None, "kind": "cpu"}
    if requested == "cpu":
        info["statement"] = "ran on CPU because device=cpu was requested; no GPU was used"
        return info
    if n > gpu_id:
        broken = gpu_smoke_test(gpu_id)
        if broken is None:
            info.update(kind="gpu", gpu_id=gpu_id,
                        statement=f"batches copied to mx.gpu({gpu_id}) ({n} GPU(s) visible)")
            return info
        if requested == "gpu":
            raise LoaderBenchError(broken)
        info["gpu_error"] = broken
        info["statement"] = (f"ran on CPU: GPU {gpu_id} is visible but unusable ({broken}); "
                             "batches stayed in host memory, GPU memory peak is null")
        return info
    why = (f"mx.context.num_gpus() = {n}, MXNet build has CUDA={cuda_build}"
           + ("" if cuda_build else " (the CPU wheel; install mxnet-cu112 on GPU workers)"))
    if requested == "gpu":
        raise LoaderBenchError(
            f"device=gpu requested but no GPU {gpu_id} is usable: {why}. On a GPU worker "
            "check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES and the mxnet-cu112 install; "
            "use --device auto to fall back to CPU"
        )
    info["statement"] = (f"ran on CPU: no GPU visible to MXNet ({why}); batches stayed in "
                         "host memory and the GPU memory peak is not measured (null)")
    return info


def gpu_smoke_test(gpu_id: int) -> str | None:
    """Run one tiny kernel on the GPU; None if it works, else what broke and what to check.

    A copy to the GPU needs no kernel, an operator does: a wheel without code for this GPU's
    architecture (e.g. mxnet-cu112 on an sm_90 H200 if it ships no PTX to JIT) fails here.
    """
    import mxnet as mx

    try:
        got = (mx.nd.ones((4,), ctx=mx.gpu(gpu_id)) * 2).asnumpy()
    except Exception as exc:
        msg = first_mxnet_message(exc)
        hint = ""
        if "no kernel image" in msg or "PTX" in msg or "invalid device function" in msg:
            hint = ("; the MXNet build has no kernels for this GPU's compute capability and "
                    "no PTX the driver could JIT (see docs/gpu-worker.md)")
        return f"a kernel on mx.gpu({gpu_id}) failed: {msg}{hint}"
    if list(got) != [2.0] * 4:
        return f"a kernel on mx.gpu({gpu_id}) computed {list(got)} instead of [2, 2, 2, 2]"
    return None


def gpu_used_bytes(mx, gpu_id: int) -> int:
    """Bytes in use on GPU ``gpu_id`` (MXNet's view): the loaders' memory baseline and peak."""
    free, total = mx.context.gpu_memory_info(gpu_id)
    return int(total - free)


HOST_FEATURES = ("CUDA", "CUDNN", "OPENMP", "OPENCV", "MKLDNN")  # recorded in bench.json


def host_info() -> dict:
    """This host as ``bench.json`` records it (hostname, versions, CPUs, MXNet features, load):
    a reused benchmark must have measured on the same one."""
    import platform

    import cv2
    import mxnet as mx

    features = mx.runtime.Features()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "hostname": platform.node(), "python": platform.python_version(),
        "mxnet": mx.__version__, "opencv": cv2.__version__, "nprocs": nprocs(),
        "cpu_count": os.cpu_count(), "loadavg_at_start": load,
        "mxnet_features": {k: features.is_enabled(k) for k in HOST_FEATURES},
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
    }
