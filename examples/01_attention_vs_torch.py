"""Lesson 2 · 01: our multi-head attention gives torch.nn.MultiheadAttention's numbers.

Run: python examples/01_attention_vs_torch.py
torch.nn uses the opposite mask convention (True = blocked); the mask is inverted at that call only.
"""

from glassformer.lessons.lesson2 import attention_vs_torch

if __name__ == "__main__":
    found = attention_vs_torch()
    print(f"max |output difference|  = {found['max_out_diff']:.2e}")
    print(f"max |weights difference| = {found['max_weight_diff']:.2e}")
    print("equal to float32 rounding" if max(found.values()) < 1e-5 else "DIFFERENT")
