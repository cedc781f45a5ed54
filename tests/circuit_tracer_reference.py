"""The reference side of tests/test_graph_vs_circuit_tracer.py, run by the Python of a venv holding
circuit-tracer 0.5.0 (never imports glassformer).

    python circuit_tracer_reference.py JOB.json OUT.pt

JOB.json: {"hf_dir", "runs": [{"name", "transcoders", "ids", "graph_pt", "graph_json", "settings"}]}. For each run:
the Hugging Face GPT-2 (or sequential GPT-NeoX) folder in TransformerLens (no weight processing), the transcoder
folder loaded by circuit-tracer's own loader, ``attribute(ids, model, **settings)``; OUT.pt gets, per run, the graph's
tensors, ``compute_graph_scores`` and ``prune_graph`` of it, and ``compute_graph_scores`` of glassformer's
``graph.pt`` read by ``Graph.from_pt``, and the node count of its ``graph.json`` as the frontend's pydantic
``Model`` validates it.
"""

import json
import sys
from pathlib import Path

import torch
from circuit_tracer.attribution.attribute import attribute
from circuit_tracer.frontend.graph_models import Model
from circuit_tracer.graph import Graph, compute_graph_scores, prune_graph
from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
from circuit_tracer.utils.caching import load_transcoders_from_cache
from safetensors.torch import load_file
from transformer_lens import HookedTransformerConfig
from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
from transformer_lens.pretrained.weight_conversions.neox import convert_neox_weights
from transformers import AutoTokenizer, GPT2LMHeadModel, GPTNeoXForCausalLM

ACT = {"gelu_new": "gelu_new", "gelu": "gelu", "relu": "relu", "gelu_pytorch_tanh": "gelu_pytorch_tanh"}


def _gpt2(hf_dir: str) -> tuple[torch.nn.Module, HookedTransformerConfig, dict]:
    hf = GPT2LMHeadModel.from_pretrained(hf_dir).float().eval()
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
        d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, act_fn=ACT[c.activation_function],
        normalization_type="LN", positional_embedding_type="standard", eps=c.layer_norm_epsilon,
        original_architecture="GPT2LMHeadModel", model_name="glassformer-test", tokenizer_name=hf_dir,
        default_prepend_bos=False, device="cpu", dtype=torch.float32)
    return hf, cfg, convert_gpt2_weights(hf, cfg)


def _neox(hf_dir: str) -> tuple[torch.nn.Module, HookedTransformerConfig, dict]:
    """A sequential-residual GPT-NeoX (glassformer's RoPE models, e.g. examples/21_graph_mechanisms.py's)."""
    hf, info = GPTNeoXForCausalLM.from_pretrained(hf_dir, output_loading_info=True)
    hf = hf.float().eval()
    if "embed_out.weight" in info["missing_keys"]:  # transformers 5 names the output lm_head, 4.x embed_out
        with torch.no_grad():
            hf.embed_out.weight.copy_(load_file(str(Path(hf_dir) / "model.safetensors"))["lm_head.weight"])
    c = hf.config
    d_head = c.hidden_size // c.num_attention_heads
    cfg = HookedTransformerConfig(
        n_layers=c.num_hidden_layers, d_model=c.hidden_size, n_ctx=c.max_position_embeddings, d_head=d_head,
        n_heads=c.num_attention_heads, d_mlp=c.intermediate_size, d_vocab=c.vocab_size, act_fn=ACT[c.hidden_act],
        normalization_type="LN", positional_embedding_type="rotary", rotary_dim=d_head, rotary_adjacent_pairs=False,
        rotary_base=getattr(c, "rotary_emb_base", None) or c.rope_theta, parallel_attn_mlp=c.use_parallel_residual,
        eps=c.layer_norm_eps,
        original_architecture="GPTNeoXForCausalLM", model_name="glassformer-test", tokenizer_name=hf_dir,
        default_prepend_bos=False, device="cpu", dtype=torch.float32)
    return hf, cfg, convert_neox_weights(hf, cfg)


def replacement_model(hf_dir: str, transcoder_dir: str) -> TransformerLensReplacementModel:
    kind = json.loads((Path(hf_dir) / "config.json").read_text())["model_type"]
    hf, cfg, state = (_neox if kind == "gpt_neox" else _gpt2)(hf_dir)
    folder = Path(transcoder_dir)
    transcoders, _ = load_transcoders_from_cache(folder.name, cache_dir=str(folder.parent), device=torch.device("cpu"),
                                                 dtype=torch.float32, lazy_decoder=False)
    model = TransformerLensReplacementModel(cfg, tokenizer=AutoTokenizer.from_pretrained(hf_dir))
    model.load_and_process_state_dict(state, fold_ln=False, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False)
    model._configure_replacement_model(transcoders)  # what from_config does after building the model
    return model


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    out = {}
    for run in job["runs"]:
        model = replacement_model(job["hf_dir"], run["transcoders"])
        ids = torch.tensor(run["ids"])
        graph = attribute(ids, model, **run["settings"])
        node_mask, edge_mask, cumulative = prune_graph(graph, 0.8, 0.98)
        ours = Graph.from_pt(run["graph_pt"])
        out[run["name"]] = {
            "adjacency": graph.adjacency_matrix, "active_features": graph.active_features,
            "activation_values": graph.activation_values, "selected_features": graph.selected_features,
            "logit_ids": torch.tensor([t.vocab_idx for t in graph.logit_targets]),
            "logit_probabilities": graph.logit_probabilities, "input_tokens": graph.input_tokens,
            "scores": torch.tensor(compute_graph_scores(graph)), "node_mask": node_mask, "edge_mask": edge_mask,
            "cumulative": cumulative, "scores_of_ours": torch.tensor(compute_graph_scores(ours)),
            "ours_shape": torch.tensor(ours.adjacency_matrix.shape),
            "ours_json_nodes": torch.tensor(len(Model.model_validate_json(Path(run["graph_json"]).read_text()).nodes)),
        }
    torch.save(out, sys.argv[2])


if __name__ == "__main__":
    main()
