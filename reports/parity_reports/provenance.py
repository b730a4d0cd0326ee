"""The run itself rather than any table: its provenance (the file's root attributes), the
at-a-glance line of where and how it ran, and what its device means for the figures."""

from .common import esc, fmt_size, hosts_text

PROVENANCE_ORDER = ["schema", "schema_version", "parity_version", "git_commit", "command_line",
                    "subcommand", "start_time_utc", "end_time_utc", "world_size", "hosts",
                    "backend", "device", "gpu", "ranks_per_gpu", "rank_devices", "cuda_version",
                    "nccl_version", "mpi_cuda_aware", "mpi_library", "hdf5_version", "compiler",
                    "cpu_model", "half_accumulate"]
ESSENTIALS = ["parity_version", "git_commit", "subcommand", "start_time_utc", "world_size",
              "hosts", "backend", "device", "gpu", "ranks_per_gpu", "nccl_version", "mpi_library",
              "cpu_model"]


def attr_text(name, value):
    if name == "hosts":
        hosts = [value] if isinstance(value, str) else list(value or [])
        return hosts_text(hosts) if hosts else "–"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def provenance_section(page, rf):
    page.add("<h2 id=\"provenance\">Provenance</h2>")
    names = [n for n in PROVENANCE_ORDER if n in rf.attrs] + \
        sorted(n for n in rf.attrs if n not in PROVENANCE_ORDER)
    rows = []
    for n in names:
        cell = esc(attr_text(n, rf.attrs[n]))
        rows.append([f"<span class=\"mono\">{esc(n)}</span>", cell])
    missing = [n for n in PROVENANCE_ORDER if n not in rf.attrs]
    page.table(["attribute", "value"], rows)
    if missing:
        page.note("Attributes the schema lists but this file lacks: " + ", ".join(missing) + ".")
    if rf.other_tables:
        page.note("Other tables in the file (not shown): " + ", ".join(rf.other_tables) + ".")


def provenance_comparison(page, rfs, labels):
    """Both runs' attributes side by side, the rows that differ highlighted."""
    a_rf, b_rf = rfs
    page.add("<h2 id=\"provenance\">Provenance</h2>")
    names = [n for n in PROVENANCE_ORDER if n in a_rf.attrs or n in b_rf.attrs]
    names += sorted((set(a_rf.attrs) | set(b_rf.attrs)) - set(PROVENANCE_ORDER))
    rows, classes = [], []
    for n in names:
        va = attr_text(n, a_rf.attrs[n]) if n in a_rf.attrs else "–"
        vb = attr_text(n, b_rf.attrs[n]) if n in b_rf.attrs else "–"
        rows.append([f"<span class=\"mono\">{esc(n)}</span>", esc(va), esc(vb)])
        classes.append("diff" if va != vb else "")
    page.table(["attribute", "A: " + labels[0], "B: " + labels[1]], rows, row_classes=classes)
    page.note("Highlighted rows differ between the runs.")


def run_words(rf):
    """The first at-a-glance line (HTML): subcommand, ranks and hosts, backend, device."""
    ws = rf.world_size
    return (f"{esc(rf.attrs.get('subcommand', '?'))} on {ws if ws else '?'} ranks "
            f"({esc(hosts_text(rf.hosts)) or 'hosts unknown'}), backend "
            f"{esc(rf.attrs.get('backend', '?'))}, device "
            f"{esc(rf.attrs.get('device', '?'))}, parity "
            f"{esc(rf.attrs.get('parity_version', '?'))}.")


def device_words(rf):
    """What the device of a run was, and what its collective figures measure there."""
    if rf.attrs.get("device") != "cuda":
        return []
    words = [f"GPU: {rf.attrs.get('gpu', '?')}"]
    try:
        sharing = int(rf.attrs.get("ranks_per_gpu", 1))
    except (TypeError, ValueError):
        sharing = 1
    if rf.world_size == 1:
        words.append("one rank: the collective figures time a rank's own copies and kernel "
                     "launches, not a network")
    elif sharing > 1:
        via = ("MPI staging through pinned host memory" if rf.attrs.get("backend") == "mpi"
               else "NCCL within one GPU")
        words.append(f"{sharing} ranks share one GPU: the collective figures measure {via} on "
                     "that GPU and host, not links between GPUs")
    table = rf.table("/bench/device_kernels")
    if table is not None and table.has("kernel", "dtype", "bandwidth_GBps", "ratio_vs_copy"):
        for i in range(len(table)):
            if table["kernel"][i] == "reduce_sum" and int(table["rank"][i]) == 0:
                words.append(f"reduction kernel ({table['dtype'][i]}) at "
                             f"{fmt_size(table['size_bytes'][i])}: "
                             f"{table['bandwidth_GBps'][i]:.1f} GB/s, "
                             f"{table['ratio_vs_copy'][i]:.3f}× the device copy (target ≥ 0.9)")
    return words


def essentials_md(rf, prefix=""):
    out = []
    for n in ESSENTIALS:
        if n in rf.attrs:
            out.append(f"- {prefix}{n}: {attr_text(n, rf.attrs[n])}")
    return out
