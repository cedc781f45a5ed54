"""Lesson 2 · 03: attention is blind to order until positions are added.

Run: python examples/03_permutation_equivariance.py
"""

from glassformer.lessons.lesson2 import permutation_equivariance

if __name__ == "__main__":
    found = permutation_equivariance()
    print(f"pos='none':       max |f(Px) - P f(x)| = {found['max_diff_pos_none']:.2e}  (equivariant)")
    print(f"pos='sinusoidal': max |f(Px) - P f(x)| = {found['max_diff_pos_sinusoidal']:.2e}  (order matters)")
