"""An attribution graph and path patching name the same head (examples/21_graph_mechanisms.py's check).

The model is built by hand, so the mechanism is known: layer 0 head 1 is a previous-token head (it writes the
previous token into a slot of the stream), layer 1 head 0 an induction head (its query, the current token,
looks for a key whose previous token matches, and its value copies the token found into the output slot that
the unembedding reads); layer 1 head 1 attends uniformly and copies every token a little; layer 0 head 0 and
the MLPs write (almost) nothing. On ``<bos> a b c d e f a b``, the next token ``c`` sits at position 3.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from glassformer import TransformerLM
from glassformer.interpret.graph import attribute
from glassformer.interpret.transcoders import random_transcoders
from glassformer.tokenizers.char import CharTokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "21_graph_mechanisms.py"
spec = importlib.util.spec_from_file_location("graph_mechanisms", SCRIPT)
mechanisms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mechanisms)

V, T, HD = 9, 16, 22  # tokens (with <bos>), positions, head width
TOK, POS, PREV, OUT = 0, V, V + T, 2 * V + T  # the stream's slots; d = 44 (one spare)


def induction_model() -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=V, d_model=2 * HD, n_heads=2, n_layers=2, d_ff=16, max_len=T, pos="learned",
                          scale_embeddings=False, tie=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            if "ffn" in name and name.endswith("weight"):  # MLPs that write almost nothing
                p.normal_(0, 0.02)
        model.embeddings.tok.weight[range(V), [TOK + i for i in range(V)]] = 1.0
        model.embeddings.pos.weight[range(T), [POS + p for p in range(T)]] = 1.0

        def head(layer: int, h: int, kind: str) -> torch.Tensor:  # (hd, d) rows of qkv
            return model.blocks[layer].self_attn.qkv.weight.view(3, 2, HD, 2 * HD)["qkv".index(kind), h]

        def write(layer: int, h: int, slot: int, n: int, gain: float) -> None:  # head dims 0..n-1 -> slot
            o = model.blocks[layer].self_attn.o_proj.weight
            o[[slot + i for i in range(n)], [h * HD + i for i in range(n)]] = gain

        for p in range(T - 1):  # L0H1: position p + 1 attends to position p, copies its token to PREV
            head(0, 1, "q")[p, POS + p + 1] = 4.0
            head(0, 1, "k")[p, POS + p] = 4.0
        for i in range(V):
            head(0, 1, "v")[i, TOK + i] = 1.0
            head(1, 0, "q")[i, TOK + i] = 4.0  # L1H0: the current token ...
            head(1, 0, "k")[i, PREV + i] = 4.0  # ... against each key's previous token
            head(1, 0, "v")[i, TOK + i] = 1.0
            head(1, 1, "v")[i, TOK + i] = 1.0  # L1H1: uniform attention (no query or key), copies every token
        write(0, 1, PREV, V, 1.0)
        write(1, 0, OUT, V, 3.0)
        write(1, 1, OUT, V, 1.0)
        model.head.weight[range(V), [OUT + i for i in range(V)]] = 2.0
    return model


@pytest.fixture(scope="module")
def setting():
    tokenizer = CharTokenizer("abcdefgh", specials=["bos"])
    model = induction_model()
    ids = torch.tensor([tokenizer.special_tokens["bos"], *tokenizer.encode("abcdefab")])
    corrupted = ids.clone()
    corrupted[3] = tokenizer.encode("h")[0]  # the token the induction head copies, changed
    tc = random_transcoders(2, 2 * HD, 32, kind="plt", activation="relu", scale=1.0)
    return model, tokenizer, tc, ids, corrupted


def test_the_hand_built_model_copies(setting):
    model, tokenizer, _, ids, _ = setting
    with torch.no_grad():
        probs = model(ids[None])[0, -1].softmax(-1)
    assert int(probs.argmax()) == tokenizer.encode("c")[0] and float(probs.max()) > 0.5


def test_graph_and_path_patching_name_the_induction_head(setting):
    model, tokenizer, tc, ids, corrupted = setting
    c = tokenizer.encode("c")[0]
    graph = attribute(model, tc, ids, target_ids=[c], batch_size=16)
    logit, earlier = graph.adjacency_matrix.shape[0] - 1, graph.n_features + 2 * len(ids) + 3  # the token at 3
    path = mechanisms.strongest_path(graph)
    assert path[0] == earlier and path[-1] == logit  # the strongest path starts at the token to copy
    shares = mechanisms.edge_by_head(model, tc, ids, graph, logit, earlier, batch_size=16)
    assert max(shares, key=shares.get) == "L1H0" and shares["L1H0"] > 0.8  # the induction head's OV
    assert abs(shares["L0H0"]) < 1e-4  # a head that writes nothing carries nothing
    patched = mechanisms.value_patching(model, ids[None], corrupted[None], c)
    assert max(patched, key=patched.get) == "L1H0" and patched["L1H0"] > 2 * patched["L1H1"] > 0
    no_match = ids.clone()
    no_match[2] = tokenizer.encode("h")[0]  # the earlier "b" changed: no key says "after b"
    keys = mechanisms.key_patching(model, ids[None], no_match[None], c, "L1H0.k")
    assert max((k for k in keys if k != "all"), key=keys.get) == "L0H1"  # the previous-token head feeds its key


def test_cutting_no_head_changes_nothing_and_every_head_leaves_only_the_direct_path(setting):
    model, tokenizer, tc, ids, _ = setting
    targets = tokenizer.encode("cb")
    before = attribute(model, tc, ids, target_ids=targets, batch_size=16)
    with mechanisms.heads_cut(model, []):
        same = attribute(model, tc, ids, target_ids=targets, batch_size=16)
    with mechanisms.heads_cut(model, [(0, 0), (0, 1), (1, 0), (1, 1)]):
        direct = attribute(model, tc, ids, target_ids=targets, batch_size=16)
    assert torch.equal(before.adjacency_matrix, same.adjacency_matrix)
    n, T = before.adjacency_matrix.shape[0], len(ids)
    tokens = slice(n - 2 - T, n - 2)
    assert before.adjacency_matrix[-2:, tokens][:, :-1].abs().max() > 0.1  # earlier tokens reach the logits ...
    assert direct.adjacency_matrix[-2:, tokens][:, :-1].abs().max() == 0  # ... only through heads
