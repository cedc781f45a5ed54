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
