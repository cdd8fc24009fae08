"""NVIDIA's Python NVML binding (nvidia-ml-py, module `pynvml`) and gpustat on fake-nvml.

Run by tests/nvml_consumers.rs with fake-nvml reachable as `libnvidia-ml.so.1` on
LD_LIBRARY_PATH and FAKE_NVML_SCENARIO naming the scenario. It walks pynvml's common
query path and gpustat's default view and prints what they saw, one tab-separated fact
per line, for the Rust test to compare with the scenario:

    driver  <version>                 nvml <version>          cuda <version>
    count   <n>
    gpu     <index> <uuid> <name> <total B> <used B> <minor> <bus id> <temp C> <power mW>
            <power limit mW> <sm clock MHz> <max sm clock MHz> <util %|NA> <compute pids>
            <graphics pids> <mig mode|NA>
    byuuid  <uuid> <index>
    mig     <gpu> <mig index> <uuid> <name> <total B> <gi> <ci> <parent uuid>
            <gi profile id> <gi profile name> <ci profile id> <ci profile name> <sm count>
    gpustat <index> <uuid> <name> <total MB> <used MB> <temp|None> <power W|None> <util|None>
    view    <a line of gpustat's default text view>
    symbol  <name> <found|missing>    every NVML symbol pynvml looked up

An NVML error is printed as `error <where> <NVMLError class>` and the script goes on.
"""

import io
import sys

import pynvml

# Record every symbol pynvml asks the library for, before gpustat wraps the lookup
# (gpustat/nvml.py captures pynvml._nvmlGetFunctionPointer when it is imported).
_lookup = pynvml._nvmlGetFunctionPointer
_symbols = {}


def _recording_lookup(name):
    try:
        fn = _lookup(name)
    except pynvml.NVMLError_FunctionNotFound:
        _symbols[name] = "missing"
        raise
    _symbols.setdefault(name, "found")
    return fn


pynvml._nvmlGetFunctionPointer = _recording_lookup


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def emit(*fields):
    print("\t".join(text(f) for f in fields))


def attempt(where, call, *args):
    try:
        return call(*args)
    except pynvml.NVMLError as e:
        emit("error", where, type(e).__name__)
        return None


def pids(processes):
    if processes is None:
        return "NA"
    return ",".join(str(p.pid) for p in sorted(processes, key=lambda p: p.pid)) or "-"


def mig_devices(gpu_index, handle):
    """pynvml's MIG path: MIG devices, their ids, parent, GPU and compute instances."""
    count = pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    for i in range(count):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except pynvml.NVMLError_NotFound:
            continue
        assert pynvml.nvmlDeviceIsMigDeviceHandle(mig)
        uuid = text(pynvml.nvmlDeviceGetUUID(mig))
        parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        gi_id = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        ci_id = pynvml.nvmlDeviceGetComputeInstanceId(mig)
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        assert text(pynvml.nvmlDeviceGetUUID(by_uuid)) == uuid
        memory = pynvml.nvmlDeviceGetMemoryInfo(mig)
        attributes = pynvml.nvmlDeviceGetAttributes(mig)
        gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
        ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
        gi_name = ci_name = "?"
        for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, p)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue
            if info.id == gi_info.profileId:
                gi_name = text(info.name)
        for p in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, p, 0)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue
            if info.id == ci_info.profileId:
                ci_name = text(info.name)
        emit("mig", gpu_index, i, uuid, pynvml.nvmlDeviceGetName(mig), memory.total, gi_id, ci_id,
             pynvml.nvmlDeviceGetUUID(parent), gi_info.profileId, gi_name, ci_info.profileId, ci_name,
             attributes.multiprocessorCount)


def pynvml_common_path():
    pynvml.nvmlInit()
    emit("driver", pynvml.nvmlSystemGetDriverVersion())
    emit("nvml", pynvml.nvmlSystemGetNVMLVersion())
    emit("cuda", pynvml.nvmlSystemGetCudaDriverVersion_v2())
    count = pynvml.nvmlDeviceGetCount()
    emit("count", count)
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        util = attempt("utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        mode = attempt("mig_mode", pynvml.nvmlDeviceGetMigMode, handle)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        emit("gpu", index, uuid, pynvml.nvmlDeviceGetName(handle), memory.total, memory.used,
             pynvml.nvmlDeviceGetMinorNumber(handle), pci.busId,
             pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
             pynvml.nvmlDeviceGetPowerUsage(handle), pynvml.nvmlDeviceGetEnforcedPowerLimit(handle),
             pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
             pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
             util.gpu if util else "NA",
             pids(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)),
             pids(pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)),
             mode[0] if mode else "NA")
        emit("byuuid", uuid, pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)))
        pynvml.nvmlDeviceGetHandleByPciBusId(pci.busId)
        pynvml.nvmlDeviceGetSerial(handle)
        pynvml.nvmlDeviceGetPowerManagementLimit(handle)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
        if mode and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
            mig_devices(index, handle)
    try:
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    except pynvml.NVMLError_NotFound as e:
        emit("unknown_uuid", type(e).__name__, str(e))
    pynvml.nvmlShutdown()


def gpustat_default_view():
    # Imported here: gpustat patches pynvml (its memory query among others) on import,
    # and wraps the recording lookup installed above.
    import gpustat

    stats = gpustat.new_query()
    for g in stats:
        e = g.entry
        emit("gpustat", e["index"], e["uuid"], e["name"], e["memory.total"], e["memory.used"],
             e["temperature.gpu"], e["power.draw"], e["utilization.gpu"])
    out = io.StringIO()
    stats.print_formatted(out, no_color=True)
    for line in out.getvalue().splitlines():
        emit("view", line)


pynvml_common_path()
gpustat_default_view()
for name, state in sorted(_symbols.items()):
    emit("symbol", name, state)
sys.stdout.flush()
