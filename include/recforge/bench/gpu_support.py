"""Which GPUs a CUDA library's kernels run on, and which loader the benchmark measures there.

CUDA's rules: machine code (SASS, a cubin) built for ``sm_XY`` runs on a GPU of compute
capability ``X.Z`` with ``Z >= Y`` — the same major version only; PTX built for
``compute_XY`` is JIT-compiled by the driver for any capability ``>= X.Y``. ``mxnet-cu112``
1.9.1's ``libmxnet.so`` ships SASS for sm_50, 60, 70, 80 and 86 and no PTX, so it runs on
Maxwell to Ampere and Ada (sm_89 runs the sm_86 code), and on nothing from Hopper (sm_90) on.

Standard library only (no pydantic, no boto3): the offline GPU check imports it as is.

- ``MXNET_CU112``: the CUDA code of mxnet-cu112 1.9.1's ``libmxnet.so``;
- ``parse_cuobjdump``: ``cuobjdump --list-elf`` / ``--list-ptx`` output, as archs;
- ``fatbin_archs``: the same, read from the fat binaries embedded in a shared library;
- ``kernel_match`` / ``kernel_mode``: how a GPU runs a library's kernels (native, compatible
  SASS, through PTX, none), as a ``Match`` / one sentence;
- ``GpuInfo`` / ``probe_gpu``: the GPU's name and capability (``nvidia-smi``, else torch.cuda);
- ``choose_loader``: what ``bench.loader`` (``auto`` included) measures on this host, or the
  refusal (``LoaderBenchError``) for MXNet on a GPU its kernels cannot run on.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import mmap
import os
import re
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# cuobjdump --list-elf / --list-ptx of mxnet-cu112 1.9.1's libmxnet.so, as archs
MXNET_CU112 = {"elf": [50, 60, 70, 80, 86], "ptx": []}
MXNET_CU112_NAME = "mxnet-cu112 1.9.1"

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_FATBIN_KIND = {1: "ptx", 2: "elf"}
# "ELF file    1: libmxnet.1.sm_50.cubin", "PTX file    1: x.1.sm_80.ptx" (or compute_80)
_CUOBJDUMP_RE = re.compile(r"^\s*(ELF|PTX) file\s+\d+:\s*\S*?\b(?:sm|compute)_(\d+)[a-z]?\b",
                           re.MULTILINE)


def parse_cuobjdump(*outputs: str) -> dict[str, list[int]]:
    """``{"elf": [...], "ptx": [...]}`` from ``cuobjdump --list-elf`` and ``--list-ptx``
    outputs (either or both, in any order)."""
    found: dict[str, set[int]] = {"elf": set(), "ptx": set()}
    for text in outputs:
        for kind, arch in _CUOBJDUMP_RE.findall(text):
            found[kind.lower()].add(int(arch))
    return {k: sorted(v) for k, v in found.items()}


def fatbin_archs(path: str | os.PathLike) -> dict[str, list[int]]:
    """The CUDA code a shared library ships: ``{"elf": [sm...], "ptx": [compute...]}``, read
    from the fat binaries embedded in it (header: magic, version, header size, fat size;
    each entry: kind, header size, payload size, ..., arch)."""
    found: dict[str, set[int]] = {"elf": set(), "ptx": set()}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = m.find(FATBIN_MAGIC)
        while pos != -1:
            if pos + 16 <= len(m):
                _, _, hsize, fsize = struct.unpack_from("<IHHQ", m, pos)
                entry, end = pos + hsize, min(pos + hsize + fsize, len(m))
                while 0 < hsize and entry + 32 <= end:
                    kind, _, ehsize, size = struct.unpack_from("<HHIQ", m, entry)
                    arch = struct.unpack_from("<I", m, entry + 28)[0]
                    if kind not in _FATBIN_KIND or ehsize < 32 or not 10 <= arch <= 200:
                        break
                    found[_FATBIN_KIND[kind]].add(arch)
                    entry += ehsize + size
            pos = m.find(FATBIN_MAGIC, pos + 4)
    return {k: sorted(v) for k, v in found.items()}


def capability_str(cap: int) -> str:
    """``86`` -> ``"8.6"``, ``120`` -> ``"12.0"``."""
    return f"{cap // 10}.{cap % 10}"


@dataclass(frozen=True)
class Match:
    """How a GPU runs a library's kernels. ``mode``: ``native`` (SASS for exactly this
    capability), ``compatible`` (SASS of the same major, lower minor), ``ptx`` (the driver
    JIT-compiles PTX), ``none``, ``cpu_build`` (no CUDA code) or ``no_gpu``; ``arch``: the
    code that runs (sm / compute number), else None."""

    mode: str
    arch: int | None
    sentence: str

    @property
    def runs(self) -> bool:
        return self.mode in ("native", "compatible", "ptx")


def kernel_match(archs: dict[str, list[int]], capability: int | None) -> Match:
    """``archs``' code on a GPU of ``capability`` (``86`` for 8.6), by CUDA's rules."""
    elf, ptx = archs.get("elf", []), archs.get("ptx", [])
    has = f"has sm {elf}, PTX {ptx}"
    if not elf and not ptx:
        return Match("cpu_build", None, "no CUDA code in the library (a CPU build)")
    if capability is None:
        return Match("no_gpu", None, f"no GPU to match (the library {has})")
    cap = capability_str(capability)
    if capability in elf:
        return Match("native", capability,
                     f"native: machine code for sm_{capability} is in the library")
    same_major = [a for a in elf if a // 10 == capability // 10 and a < capability]
    if same_major:
        a = max(same_major)
        return Match("compatible", a,
                     f"compatible: no sm_{capability} machine code, but this {cap} GPU runs "
                     f"the sm_{a} code (same major {capability // 10}, lower minor; {has})")
    below = [a for a in ptx if a <= capability]
    if below:
        a = max(below)
        return Match("ptx", a,
                     f"through PTX: no sm_{capability} machine code ({has}); the driver "
                     f"JIT-compiles compute_{a} PTX (slow first start, cached after)")
    return Match("none", None,
                 f"none: no machine code for major {capability // 10} at or below "
                 f"sm_{capability} and no PTX at or below compute_{capability} ({has}): the "
                 "library's kernels cannot run on this GPU")


def kernel_mode(archs: dict[str, list[int]], capability: int | None) -> str:
    """How this GPU runs the library's kernels, in one sentence."""
    return kernel_match(archs, capability).sentence


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the benchmark sees it: index, name, compute capability (``90`` for 9.0)."""

    index: int
    name: str
    capability: int
    source: str  # "nvidia-smi" or "torch.cuda"

    def describe(self) -> str:
        cap = capability_str(self.capability)
        return f"GPU {self.index} ({self.name}, compute capability {cap})"


def _nvidia_smi_gpus() -> list[GpuInfo] | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and re.fullmatch(r"\d+\.\d+", parts[2]):
            major, minor = parts[2].split(".")
            gpus.append(GpuInfo(int(parts[0]), parts[1], int(major) * 10 + int(minor),
                                "nvidia-smi"))
    return gpus


def _torch_gpus() -> list[GpuInfo]:
    if importlib.util.find_spec("torch") is None:
        return []
    import torch

    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        out.append(GpuInfo(i, torch.cuda.get_device_name(i), major * 10 + minor, "torch.cuda"))
    return out


def probe_gpu(gpu_id: int = 0) -> GpuInfo | None:
    """GPU ``gpu_id`` (``nvidia-smi``'s numbering, else torch.cuda's), or None: no GPU here."""
    gpus = _nvidia_smi_gpus()
    if gpus is None:
        gpus = _torch_gpus()
    return next((g for g in gpus if g.index == gpu_id), None)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False


def installed_loaders() -> dict[str, bool]:
    """Which of the core environment's loaders (``recforge.bench.loaders``) can be imported
    here."""
    from recforge.bench import loaders

    return {r.name: _installed(r.requires) for r in loaders.LOADERS
            if r.interpreter == loaders.CORE}


@functools.lru_cache(maxsize=4)
def mxnet_archs(python: str | None) -> tuple[dict[str, list[int]], str]:
    """The CUDA code of the MXNet environment's ``libmxnet.so`` and where it was read; the
    mxnet-cu112 1.9.1 listing (``MXNET_CU112``) when it cannot be located."""
    if python:
        try:
            lib = subprocess.run(
                [python, "-c", "import importlib.util, pathlib; print(pathlib.Path("
                 "importlib.util.find_spec('mxnet').origin).parent / 'libmxnet.so')"],
                capture_output=True, text=True, check=True, timeout=60).stdout.strip()
            return fatbin_archs(lib), lib
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("bench: could not read libmxnet.so of %s (%s); assuming %s", python, exc,
                     MXNET_CU112_NAME)
    return MXNET_CU112, f"{MXNET_CU112_NAME} (the GPU worker's wheel, assumed)"


def mxnet_refusal(gpu: GpuInfo, match: Match, requested: str) -> str:
    """Why MXNet's loader cannot measure on ``gpu``, and the fixes."""
    return (
        f"bench.loader {requested} with device=gpu: MXNet's kernels cannot run on "
        f"{gpu.describe()}: {match.sentence}. Set bench.loader: torch (the PyTorch loader) or "
        "auto (picks a loader that runs here), or install an MXNet build with code for "
        f"sm_{gpu.capability} (mxnet-cu120 or later, or a source build with "
        f"CUDA_ARCH including sm_{gpu.capability} or PTX)")


@dataclass(frozen=True)
class Choice:
    """What the benchmark measures: ``loader`` (mxnet, dali, both, all, torch) and why."""

    requested: str
    loader: str
    why: str
    gpu: GpuInfo | None = None
    mxnet_kernels: str | None = None

    def as_dict(self) -> dict:
        return {"requested": self.requested, "measured": self.loader, "why": self.why,
                "gpu": None if self.gpu is None else {
                    "index": self.gpu.index, "name": self.gpu.name,
                    "compute_capability": capability_str(self.gpu.capability),
                    "source": self.gpu.source},
                "mxnet_kernels": self.mxnet_kernels}


# the ``bench.loader`` values that measure MXNet's loader (``both``, ``all``: beside others)
WITH_MXNET = ("mxnet", "both", "all")


def choose_loader(requested: str, device: str, task_loader: str, gpu: GpuInfo | None,
                  archs: dict[str, list[int]], installed: dict[str, bool]) -> Choice:
    """What ``bench.loader: requested`` measures on a host with ``gpu`` (None: no GPU), given
    MXNet's CUDA code ``archs`` and the core environment's ``installed`` loaders.

    A GPU worker is a host where ``device`` is not ``cpu`` and a GPU is present. There
    ``auto`` picks MXNet's loader when its kernels run on the GPU, else the PyTorch loader
    (classification), else DALI (classification, detection) when installed; elsewhere
    ``auto`` is MXNet's loader as before. MXNet's loader (``mxnet``, ``both``, ``all``) with
    ``device=gpu`` on a GPU its kernels cannot run on is refused, never measured on CPU.
    """
    from recforge.bench.loaders import one
    from recforge.bench.records import LoaderBenchError

    match = kernel_match(archs, gpu.capability if gpu else None)
    kernels = match.sentence if gpu else None
    if requested in WITH_MXNET and device == "gpu" and gpu and not match.runs:
        raise LoaderBenchError(mxnet_refusal(gpu, match, requested))
    if requested != "auto":
        return Choice(requested, requested, f"bench.loader: {requested}", gpu, kernels)
    if device == "cpu" or gpu is None:
        why = "device=cpu" if device == "cpu" else "no GPU on this host"
        return Choice("auto", "mxnet", f"auto: MXNet's loader ({why})", gpu, kernels)
    if match.runs:
        return Choice("auto", "mxnet", f"auto: MXNet's kernels run on {gpu.describe()} "
                      f"({match.mode})", gpu, kernels)
    cant = f"MXNet's kernels cannot run on {gpu.describe()}"
    if one("torch").serves(task_loader) and installed.get("torch"):
        return Choice("auto", "torch", f"auto: {cant}; the PyTorch loader measures", gpu,
                      kernels)
    if one("dali").serves(task_loader) and installed.get("dali"):
        return Choice("auto", "dali", f"auto: {cant}; DALI's loader measures", gpu, kernels)
    raise LoaderBenchError(
        f"bench.loader auto: {cant} ({match.sentence}), and no other loader for "
        f"options.loader {task_loader!r} is installed: install the 'torch' extra "
        "(classification) or the 'dali' extra (classification, detection), use device: cpu, "
        f"or an MXNet build with code for sm_{gpu.capability} (mxnet-cu120 or later)")


def resolve_loader(requested: str, device: str, gpu_id: int, task_loader: str,
                   mxnet_python: Callable[[], str | None] = lambda: None) -> Choice:
    """``choose_loader`` with this host's facts: the GPU (probed only where it decides:
    ``auto`` unless ``device=cpu``, MXNet's loader with ``device=gpu``) and the CUDA code of
    the MXNet environment's library (``mxnet_python()`` names its interpreter; read only
    when a GPU is there)."""
    needs_gpu = (requested == "auto" and device != "cpu") or (
        requested in WITH_MXNET and device == "gpu")
    gpu = probe_gpu(gpu_id) if needs_gpu else None
    archs = MXNET_CU112
    if gpu is not None:
        archs = mxnet_archs(mxnet_python())[0]
    return choose_loader(requested, device, task_loader, gpu, archs, installed_loaders())
