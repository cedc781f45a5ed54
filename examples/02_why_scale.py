"""Lesson 2 · 02: why attention divides the scores by sqrt(d).

Run: python examples/02_why_scale.py
Without the scale the softmax saturates as the width grows (largest weight -> 1, gradient -> 0).
"""

from glassformer.lessons.lesson2 import why_scale

if __name__ == "__main__":
    print(f"{'d':>6} {'max weight, unscaled':>22} {'scaled':>8} {'grad norm, unscaled':>21} {'scaled':>8}")
    for row in why_scale():
        print(f"{row['d']:>6} {row['max_weight_unscaled']:>22.3f} {row['max_weight_scaled']:>8.3f} "
              f"{row['grad_norm_unscaled']:>21.4f} {row['grad_norm_scaled']:>8.4f}")
