"""The one way in and out: the argument checks (checks), a bounded reader per file format (loaders), guarded
atomic writes (fileio), JSON-lines
records, safetensors headers read without tensors, memory budgets checked before allocating, resume states checked
against what they go into, Ctrl-C/SIGTERM taken at a step's end (signals), and the terminal's side (heartbeat
lines, display-column widths). Torch-free to import."""
