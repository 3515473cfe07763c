#!/usr/bin/env python3
"""Compares the `--json` summaries of two `syslm train` runs (the last line of their stdout).

  loss_checks.py same STEPS VOCAB REF RUN WHAT      the runs differ only in the order of sums
  loss_checks.py follows REF RUN WHAT               RUN compresses gradients, REF does not

`same`: two runs of the same training that sum in other orders (one process against data, tensor
or pipeline parallel ranks; a resume at another world size) may differ by about
STEPS * sqrt(VOCAB) * 2^-24 relative in their loss: the n - 1 roundings of a sum of n terms add
up like a random walk, the vocabulary's softmax denominator is the longest sum of a step, and each
step carries the differences of the ones before (tests/parallel/drift.hpp has the whole derivation).
The bound is twice that.

`follows`: the compressed run keeps at least half of the progress the exact run made from its
first loss (tests/parallel/drift.hpp, expect_follows: one short run's gap is chaotic; how close
compression comes on real text is measured by bench/parallel/bench_grad_compress.py).
"""
import json
import math
import sys


def summary(text):
    return json.loads(text)


def main(argv):
    kind = argv[1]
    if kind == "same":
        steps, vocab = int(argv[2]), int(argv[3])
        a, b, what = summary(argv[4])["final_loss"], summary(argv[5])["final_loss"], argv[6]
        bound = 2 * steps * math.sqrt(vocab) * 2.0**-24
        assert abs(a - b) <= bound * abs(a), \
            f"{what}: final loss {b:.9f} against {a:.9f} (relative {abs(a - b) / abs(a):.3g} > {bound:.3g})"
        print(f"{what}: final loss {b:.9f} against {a:.9f} (relative {abs(a - b) / abs(a):.2g}, bound {bound:.2g})")
    elif kind == "follows":
        ref, run, what = summary(argv[2]), summary(argv[3]), argv[4]
        progress = ref["first_loss"] - ref["final_loss"]
        assert progress > 0, f"{what}: the exact run did not train ({ref})"
        gap = abs(run["final_loss"] - ref["final_loss"])
        assert gap <= progress / 2, \
            f"{what}: final loss {run['final_loss']:.6f}, exact {ref['final_loss']:.6f} from {ref['first_loss']:.6f}"
        print(f"{what}: final loss {run['final_loss']:.6f}, exact {ref['final_loss']:.6f} "
              f"(gap {gap / progress:.1%} of the progress)")
    else:
        sys.exit(f"unknown check {kind}")


if __name__ == "__main__":
    main(sys.argv)
