"""Timing GPU calls in turns in one process, for the scripts beside this file
(strided_vs_dense.py, batched_vs_cublas.py), and the run's provenance line.

A sample is one torch.cuda.Event pair around `launches` back-to-back calls of one row
on torch's current stream, after a torch.cuda.synchronize; its time is the pair's
elapsed time over `launches`. Every round takes one sample of each row, the first row
rotating from round to round (two rows alternate), since at the power limit of an H100
or H200 a row timed first runs cooler and faster (docs/bench.md); a row's figure is
the median over the rounds after the warm-up ones.

Queue-ahead: before the start event, the GPU is given a sleep kernel
(torch.cuda._sleep) long enough for the host to queue every launch of the sample
behind it, so that the sample measures the kernels back to back and not the rate at
which Python issues them (which matters where a launch takes tens of microseconds:
the smallest batched GEMMs). The sleep is calibrated once against the events.

torch is imported inside the functions, so that a script's --dry-run needs neither
torch nor a GPU.
"""
import datetime
import os
import statistics
import subprocess
from pathlib import Path

# Host time per queued call the sleep must cover: a Python call with out= is about
# 10 us on an H100 host (docs/perf/host.md), torch's eager ops about as much each;
# 100 us leaves room for the checking path of a strided out= and a slow host.
HOST_US_PER_CALL = 100.0


def git_commit():
    """{"sha", "short", "dirty"} of the checkout holding this file, or None. A tree
    copied without its git history names its commit in EPIFUSE_COMMIT instead."""
    if os.environ.get("EPIFUSE_COMMIT"):
        sha = os.environ["EPIFUSE_COMMIT"]
        return {"sha": sha, "short": sha[:7], "dirty": False}
    here = str(Path(__file__).resolve().parent)
    try:
        def git(*argv):
            return subprocess.run(["git", "-C", here, *argv], capture_output=True, text=True,
                                  check=True).stdout.strip()
        sha, short = git("rev-parse", "HEAD"), git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no") != ""
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"sha": sha, "short": short, "dirty": dirty}


def provenance():
    """What a run's header line and JSON record name: GPU, torch, CUDA, epifuse's
    version, the commit and the date (UTC)."""
    import torch
    import epifuse
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "epifuse": epifuse.__version__, "commit": git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def header(p):
    """The header line of provenance() `p`."""
    c = p["commit"]
    at = f"{c['short']}{' (dirty)' if c['dirty'] else ''}" if c else "unknown commit"
    return f"# {p['gpu']}, torch {p['torch']} (CUDA {p['cuda']}), epifuse {p['epifuse']}, commit {at}, {p['date']}"


class QueueAhead:
    """The sleep kernel issued before a sample's start event (module docstring)."""

    def __init__(self, enabled=True):
        import torch
        self.cycles_per_ms = None
        self.reason = None
        if not enabled:
            self.reason = "off (--no-queue-ahead)"
        elif not hasattr(torch.cuda, "_sleep"):
            self.reason = f"off: torch {torch.__version__} has no torch.cuda._sleep"
        else:
            self.cycles_per_ms = self._calibrate()

    @staticmethod
    def _calibrate():
        import torch
        cycles = 1 << 22
        torch.cuda._sleep(cycles)  # the first call loads the kernel
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return cycles / max(statistics.median(times), 1e-3)

    def before(self, launches):
        """Keeps the GPU busy while the host queues `launches` calls."""
        if self.cycles_per_ms is not None:
            import torch
            torch.cuda._sleep(int(self.cycles_per_ms * max(0.5, launches * HOST_US_PER_CALL / 1e3)))

    def describe(self):
        if self.cycles_per_ms is None:
            return self.reason
        return f"on ({self.cycles_per_ms / 1e3:.0f} sleep cycles a us)"


def sample(call, launches, queue):
    """ms per launch of `launches` back-to-back calls of `call`, by one event pair."""
    import torch
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    queue.before(launches)
    start.record()
    for _ in range(launches):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / launches


def time_in_turns(rows, launches, warmup, rounds, queue):
    """{row name: [ms per launch, one per round after the warm-up ones]} of `rows`
    ({name: call}), each round sampling every row once, the first row rotating."""
    names = list(rows)
    times = {n: [] for n in names}
    for r in range(warmup + rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            ms = sample(rows[name], launches, queue)
            if r >= warmup:
                times[name].append(ms)
    return times


def summary(ms):
    """{"ms": the median, "iqr_pct": the interquartile range over the median in %,
    "rounds_ms": every round's} of one row's per-round times."""
    med = statistics.median(ms)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [med, med, med]
    return {"ms": med, "iqr_pct": 100.0 * (q[2] - q[0]) / med if med > 0 else 0.0, "rounds_ms": list(ms)}


def name_list(allowed, what):
    """An argparse type: a comma-separated list of names from `allowed` (an error names the others)."""
    import argparse

    def parse(text):
        v = [x for x in text.split(",") if x]
        bad = [x for x in v if x not in allowed]
        if bad or not v:
            raise argparse.ArgumentTypeError(f"{what}: {', '.join(bad) or 'nothing'} not among {', '.join(allowed)}")
        return v
    return parse


def add_timing_arguments(ap, rounds, warmup, rounds_help):
    """The timing options both scripts take: --launches, --rounds, --warmup, --no-queue-ahead, --json."""
    ap.add_argument("--launches", type=int, default=20, help="calls a sample, between one event pair (default 20)")
    ap.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    ap.add_argument("--warmup", type=int, default=warmup, help=f"untimed rounds first (default {warmup})")


def add_output_arguments(ap):
    ap.add_argument("--no-queue-ahead", action="store_true",
                    help="no GPU sleep before a sample's start event (then the host's issue rate may show)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write every number here, per-round times too")


def check_timing_arguments(ap, args):
    if args.rounds < 1 or args.warmup < 0 or args.launches < 1:
        ap.error("--rounds and --launches must be at least 1, --warmup at least 0")


def check_gpu(ap, args, torch):
    """Outside --dry-run the run needs torch and a CUDA device: an argparse error says which is missing."""
    if args.dry_run:
        return
    if torch is None:
        ap.error("torch is not importable (--dry-run runs without it)")
    if not torch.cuda.is_available():
        ap.error("no CUDA device (--dry-run runs without one)")

