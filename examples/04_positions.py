"""Lesson 2 · 04: what position encodings change, on a task that needs order.

Run: python examples/04_positions.py
Each tiny bidirectional model learns to output its left neighbour's token; without positions it can
only guess.
"""

import argparse

import torch

from glassformer.lessons.lesson2 import positions_on_an_order_task

if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and the figures do not depend on the core count
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300, help="training steps per model")
    for row in positions_on_an_order_task(steps=parser.parse_args().steps):
        print(f"{row['pos']:<11} accuracy {row['accuracy']:.3f}   (chance {row['chance']:.3f})")
