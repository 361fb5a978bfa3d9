"""The machine a run ran on, for `summary.json` and every committed figure: processor and cores, memory, JAX's
devices, the library versions, the XLA flags and glibc's tunables (`glibc.malloc.hugetlb` moves some CPU timings:
`benchmarks/compute_bound.py`). Read once per process; nothing here starts a device computation
(JAX's backend is already up when a run finishes)."""

from __future__ import annotations

import functools
import os
import platform
from importlib import metadata

from envs.cores import usable_cores

LIBRARIES = ("jax", "jaxlib", "flax", "optax", "envpool", "numpy")


def cpu_model() -> str:
    """The processor: its model name, and on x86 its family, model and widest vector extension.

    Cloud machines often mask the name: "AMD EPYC" here is at times a Zen 3 with AVX2 only, at others a processor
    on which the same suite ran in 13 min instead of 24 and the committed convolution plans were timed; the card and
    the plan cache keep them apart."""
    try:
        with open("/proc/cpuinfo") as f:
            return describe_cpuinfo(f.read())
    except OSError:
        return platform.processor() or platform.machine()


VECTOR_EXTENSIONS = ("avx512f", "avx2", "avx", "sve", "asimd")  # widest first


def describe_cpuinfo(text: str) -> str:
    """`cpu_model` from the text of /proc/cpuinfo (its first processor's block)."""
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Hardware") or platform.machine()
    features = set((fields.get("flags") or fields.get("Features") or "").split())
    widest = next((ext for ext in VECTOR_EXTENSIONS if ext in features), None)
    details = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    details += [widest.upper()] if widest else []
    return f"{name} ({', '.join(details)})" if details else name


def memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _static_card() -> dict:
    memory = memory_gib()
    return {
        "cpu": cpu_model(),
        "cores": usable_cores(),
        "memory_gib": round(memory, 1) if memory else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in LIBRARIES},
    }


def card() -> dict:
    """The run's hardware card: the static part above plus JAX's backend, devices and XLA flags."""
    import jax

    devices = jax.devices()
    return {
        **_static_card(),
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} {d.device_kind}" for d in devices],
        "processes": jax.process_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
    }


def describe(hardware: dict) -> str:
    """One line for reports: processor, cores and memory; the devices by kind; the JAX version."""
    memory = f", {hardware['memory_gib']:.0f} GiB" if hardware.get("memory_gib") else ""
    kinds: dict[str, int] = {}
    for device in hardware.get("devices", []):
        kind = device.split(" ", 1)[-1]
        kinds[kind] = kinds.get(kind, 0) + 1
    devices = ", ".join(f"{kind} x{count}" for kind, count in kinds.items())
    return (f"{hardware['cpu']}, {hardware['cores']} cores{memory}; {devices}; "
            f"jax {hardware['versions'].get('jax')}")
