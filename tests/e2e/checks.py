"""Pass/fail bookkeeping for the Python end-to-end tests: check() prints one line per check and counts it;
summary() prints the closing "N passed, M failed" line and gives the exit code."""

counts = {"passed": 0, "failed": 0}


def check(name, cond, detail=""):
    if cond:
        counts["passed"] += 1
        print(f"[ OK ] {name}", flush=True)
    else:
        counts["failed"] += 1
        print(f"[FAIL] {name} {detail}", flush=True)
    return cond


def summary(suffix=""):
    """Prints "N passed, M failed<suffix>"; returns 1 when anything failed, else 0."""
    print(f"{counts['passed']} passed, {counts['failed']} failed{suffix}", flush=True)
    return 1 if counts["failed"] else 0
