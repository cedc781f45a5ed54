"""Hook points are modules (glassformer.nn.taps.Tap): a tap added to a block is a hook point everywhere, with no
list edited; names and order come from the module tree; an idle tap leaves the numbers alone."""

import torch

from glassformer import TransformerLM
from glassformer.interpret import act_name, hook_points, run_with_cache, run_with_hooks
from glassformer.nn import TransformerBlock
from glassformer.nn.taps import Tap


class ExtraTapBlock(TransformerBlock):
    """A block with one tap more: the residual stream half way through the feed-forward's output."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hook_extra = Tap()

    def forward(self, x, *args, **kwargs):
        out, weights = super().forward(x, *args, **kwargs)
        return self.hook_extra(out * 0.5) * 2.0, weights


def test_a_tap_added_in_a_subclass_is_found_by_every_tool():
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32).eval()
    ids = torch.randint(0, 20, (2, 6))
    plain = model(ids)
    extra = ExtraTapBlock(16, 2, 32)
    extra.load_state_dict(model.blocks[1].state_dict())
    model.blocks[1] = extra
    names = list(hook_points(model))
    assert names.index("blocks.1.hook_extra") == names.index("blocks.1.hook_resid_post") + 1  # the tree's order
    assert act_name("extra", 1) == "blocks.1.hook_extra"
    logits, cache = run_with_cache(model, ids)
    torch.testing.assert_close(logits, plain)
    torch.testing.assert_close(cache["blocks.1.hook_extra"], cache["blocks.1.hook_resid_post"] * 0.5)
    assert cache["extra", 1] is cache["blocks.1.hook_extra"]
    zeroed = run_with_hooks(model, ids, hooks=[("extra", lambda x, hook: torch.zeros_like(x))])
    torch.testing.assert_close(zeroed, model.logits(model.ln_final(model.norm_f, torch.zeros(2, 6, 16))))


def test_taps_are_identities_with_no_state():
    model = TransformerLM(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, pos="rope")
    taps = [m for m in model.modules() if isinstance(m, Tap)]
    assert len(taps) == len(hook_points(model))  # every tap is a point and every point a tap
    assert all(not list(t.parameters()) and not list(t.buffers()) for t in taps)
    assert not any("hook_" in key for key in model.state_dict())  # checkpoints do not see them
    x = torch.randn(3)
    assert all(t(x) is x for t in taps)


def test_a_part_replaced_or_removed_is_the_one_the_forward_reads():
    """Tapped keeps child modules as plain attributes too: assignment, add_module and deletion keep the plain
    attribute and the registered module the same object, so the forward always runs the part the tree holds."""
    torch.manual_seed(0)
    model = TransformerLM(vocab_size=32, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=8).eval()
    ids = torch.randint(0, 32, (1, 5))
    block = model.blocks[0]
    zero = torch.nn.Linear(16, 16)
    torch.nn.init.zeros_(zero.weight)
    torch.nn.init.zeros_(zero.bias)
    with torch.no_grad():
        plain = model(ids)
        block.self_attn.o_proj = zero  # attention now writes nothing
        assert block.self_attn.o_proj is dict(block.self_attn.named_children())["o_proj"] is zero
        without_attention = model(ids)
        block.self_attn.add_module("o_proj", torch.nn.Identity())
        assert isinstance(block.self_attn.o_proj, torch.nn.Identity)
        assert isinstance(dict(block.self_attn.named_children())["o_proj"], torch.nn.Identity)
        block.ffn = None  # a block without its feed-forward
        assert block.ffn is None and "ffn" not in dict(block.named_children())
        del block.self_attn.o_proj
        assert "o_proj" not in vars(block.self_attn) and "o_proj" not in dict(block.self_attn.named_children())
    assert not torch.equal(plain, without_attention)
    # the replacement changed the numbers exactly as a model built without attention's write would give
    torch.manual_seed(0)
    again = TransformerLM(vocab_size=32, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=8).eval()
    again.blocks[0].self_attn.o_proj.weight.data.zero_()
    again.blocks[0].self_attn.o_proj.bias.data.zero_()
    with torch.no_grad():
        torch.testing.assert_close(again(ids), without_attention, rtol=0, atol=0)
