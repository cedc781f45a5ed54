"""The words a learner reads, in English and Chinese: the demo's printed steps and the HTML report's labels.

One table per language, the same keys in each (a test checks that, and that each Chinese message uses
the same ``{fields}`` as its English one). :func:`text` looks a message up and fills its fields;
:func:`resolve_lang` turns ``--lang`` (or, when it is not given, the locale: ``LC_ALL``,
``LC_MESSAGES``, ``LANG``) into ``"en"`` or ``"zh"``. The Chinese follows the course's own words
(注意力、掩码、补齐、前缀 LM、交叉注意力、贪心生成……).

Error messages stay in English: they are searched for, quoted in issues and matched by tests.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping

from ..errors import GlassformerError, shown

LANGS = ("en", "zh")
HTML_LANG = {"en": "en", "zh": "zh-CN"}  # the page's <html lang>: picks the CJK glyph variants

EN: dict[str, str] = {
    # ---------------------------------------------------------------- the report page (report.py)
    "structure.causal": "decoder-only (causal)",
    "structure.bidirectional": "encoder-only (bidirectional)",
    "structure.prefix": "prefix-LM",
    "structure.encoder-decoder": "encoder-decoder",
    "report.title": "glassformer report: {structure}",
    "report.summary": "{model} · {structure} · {dims} × {heads} heads · d_model {d_model} · {params} parameters",
    "report.dims_lm": "{layers} layers",
    "report.dims_encdec": "{enc} encoder + {dec} decoder layers",
    "note.cap": "The {name} has {n} tokens; the report keeps the first {max_tokens} (max_tokens={max_tokens}) "
                "and the model ran on those only.",
    "note.name.text": "text",
    "note.name.target": "target",
    "note.no_target_prefix": "No target given: the whole text is the prefix (prefix_len = its length).",
    "note.encoder_only": "Encoder-only models do not generate text, so there is no generation trace.",
    "note.no_target_encdec": "No target given: the decoder reads the start token and the model's own greedy output.",
    "note.no_target_encdec_alone": "No target given: the decoder reads the start token alone.",
    "note.interpret_encdec": "The logit lens, head scores and ablation effects are drawn for single-stack models "
                             "(TransformerLM); use glassformer.interpret on an encoder-decoder.",
    "note.heads_causal_only": "Head scores (previous-token, induction) are measured on causal models only.",
    # the two notes of the generation trace below are still written in English by report.py (being split up
    # now); its new files take them from here: tr("note.trace_target", lang, n=len(tgt)) and
    # tr("note.trace_same", lang, token=repr(label))
    "note.trace_target": "The generation trace answers the prefix alone, for the target's {n} tokens: "
                         "compare its choices with the target.",
    "note.trace_same": "The greedy choice is {token} at every step of the generation trace: what a model with "
                       "random weights (a --preset, untrained) does. Train it, or inspect a checkpoint, for a "
                       "trace that means something.",
    "view.self": "Self-attention",
    "view.enc": "Encoder self-attention",
    "view.dec": "Decoder self-attention",
    "view.cross": "Cross-attention",
    "caption.causal": "Each token attends to itself and the tokens before it (causal mask).",
    "caption.bidirectional": "Each token attends to every token of the sequence (no causal mask).",
    "caption.prefix": "The first {prefix_len} tokens (the prefix) see each other both ways; the rest is causal.",
    "caption.padded": " Padded positions are masked out as keys.",
    "caption.enc": "Each source token attends to every source token (bidirectional).",
    "caption.dec": "Each target token attends to itself and the target tokens before it (causal).",
    "caption.cross": "Each target token (query) attends to the encoder's output for every source token.",
    "caption.padded_source": " Padded source positions are masked out as keys.",
    "section.attention": "Attention",
    "noscript": "The attention views need JavaScript; the data is in the gf-data script element.",
    "section.generation": "Generation trace",
    "generation.intro": "Greedy decoding, {steps} steps: at each step the {top_k} most likely next tokens with "
                        "their probabilities; the chosen one is highlighted.",
    "generation.continuation": "Continuation:",
    "generation.step": "step",
    "generation.chosen": "chosen",
    "section.shapes": "Shapes of the forward pass",
    "shapes.intro": "Output shape of each part, in the order it ran (B batch, T tokens, d width, V vocabulary).",
    "shapes.step": "step",
    "shapes.shape": "shape",
    "section.model": "Model",
    "model.params": "{params} trainable parameters (a tied matrix counts once).",
    "model.part": "part",
    "model.parameters": "parameters",
    "model.total": "total",
    "model.field": "config field",
    "model.value": "value",
    "footer": "Written by glassformer; self-contained, works offline.",
    # ---------------------------------------------------------------- the "why" sections (report_interpret.py)
    "lens.title": "Logit lens",
    "lens.intro": "What the residual stream predicts for the next token if the model stopped before each block, "
                  "read through the model's own final norm and output layer; the last row is the model's "
                  "output. Each cell: the top token and its probability (hover for the top candidates).",
    "lens.read": "read",
    "lens.before": "before block {block}",
    "lens.output": "output",
    "lens.position": "position {n}",
    "heads.title": "Head scores",
    "heads.intro": "On random tokens repeated twice ({length} tokens, then the same {length} again): each "
                   "head's mean attention to the previous token, and, over the second copy, to the token after "
                   "the current one's first copy (an induction head). Next-token loss: {first} on the first "
                   "copy, {repeat} on the repeat.",
    "heads.previous": "Previous-token score",
    "heads.induction": "Induction score",
    "ablation.title": "Ablation effects",
    "ablation.intro": "How much the log-probability of the model's own top prediction (mean over positions, "
                      "{base} intact) drops when one head's output is set to zero; negative: the prediction "
                      "gets more confident without it.",
    "table.head": "head {head}",
    "table.layer": "layer {layer}",
    # ---------------------------------------------------------------- the page's script (report.js)
    "js.head_view": "Head view",
    "js.model_view": "Model view",
    "js.layer": "Layer ",
    "js.heads": "Heads",
    "js.all": "all",
    "js.none": "none",
    "js.toggle_head": "show or hide head ",
    "js.padding_title": "padding (masked out as a key) · ",
    "js.position": "position ",
    "js.left": "left: ",
    "js.right": " · right: ",
    "js.target_queries": "target tokens (queries)",
    "js.tokens_queries": "tokens as queries",
    "js.source_keys": "source tokens (keys)",
    "js.tokens_keys": "tokens as keys",
    "js.links_before": " · per token and head the ",
    "js.links_after": " strongest links are drawn; hover or click a token to see all of its own",
    "js.prefix_before": "prefix (",
    "js.prefix_after": " tokens, seen both ways); red line: prefix boundary",
    "js.padding": "padding: no token attends to it",
    "js.grid_caption": "Rows: layers · columns: heads · each square: queries down, keys across, darker = more "
                       "weight (colour ∝ √weight). Click a square to enlarge it.",
    "js.head": "head ",
    "js.layer_lower": "layer ",
    "js.click_enlarge": " (click to enlarge)",
    "js.zoom_layer": "Layer ",
    "js.zoom_head": " · head ",
    "js.point": "Point at a cell to read its weight.",
    "js.query": "query ",
    "js.key": " → key ",
    # ---------------------------------------------------------------- the run page (report_run.py)
    "run.title": "Training run: {name}",
    "run.shape": "{layers} layers x {heads} heads, d_model {d_model}",
    "run.summary": "{steps} steps.",
    "run.summary_shape": "{steps} steps; {shape}.",
    "run.not_watched": "This run was not watched: add a <code>watch:</code> block to its config "
                       "(e.g. <code>watch: {{every: 0}}</code>) to record head scores, the logit lens and attention "
                       "snapshots at each evaluation.",
    "run.axis.step": "step",
    "run.axis.cross_entropy": "cross-entropy (nats)",
    "run.axis.nats": "nats",
    "run.axis.score": "score",
    "run.chart.loss": "Loss",
    "run.chart.probe": "Repeated random tokens: loss on each copy",
    "run.chart.best_per_layer": "Best head's score per layer",
    "run.chart.best": "Best head's score",
    "run.series.train": "training loss",
    "run.series.val": "validation loss",
    "run.series.first": "loss on the first copy",
    "run.series.repeat": "loss on the repeated copy",
    "run.series.best_layer": "{kind}, layer {layer}",
    "run.series.best_head": "best {kind} head",
    "run.kind.induction": "induction score",
    "run.kind.previous_token": "previous-token score",
    "run.kind.duplicate": "duplicate-token score",
    "run.kind.entropy": "attention entropy (nats)",
    "run.short.induction": "induction",
    "run.short.previous_token": "previous-token",
    "run.short.duplicate": "duplicate-token",
    "run.short.entropy": "entropy",
    "run.heatmap": "{kind} — {layers} layers (rows) x {heads} heads (columns)",
    "run.snapshot": "layer {layer}, head {head}",
    "run.slider": "Step",
    "run.heads.title": "Heads",
    "run.heads.intro": "On random tokens repeated twice: a previous-token head attends one position back, an "
                       "induction head to the token after the current token's earlier copy, a duplicate-token head "
                       "to that earlier copy itself (1: always there). Entropy is measured on the probe text (0: one "
                       "key; higher: spread out).",
    "run.snapshots.title": "Attention snapshots",
    "run.snapshots.intro": "Watched heads on the probe text's first tokens (rows: queries, columns: keys): ",
    "run.lens.intro": "Next-token loss on the probe text when the residual stream is read before each block (and "
                      "after the last) through the final norm and output layer; rows bottom to top of the model, "
                      "columns steps (darker: lower loss).",
    "run.norms.read": "read before",
    "run.norms.resid": "residual norm",
    "run.norms.weight": "block weight norm",
    "run.norms.lens": "lens loss",
    "run.attribution.title": "Attribution patching",
    "run.attribution.intro": "Patching one head's output from clean rows (random tokens repeated) into corrupted "
                             "ones (the first copy replaced): the change in the second copy's mean log-probability "
                             "({corrupted} corrupted, {clean} clean). Left: the gradient estimate, one forward and "
                             "backward for every head; right: exact patching, one forward per head. Correlation "
                             "over heads: {correlation}. Top heads, estimate: {estimate}; exact: {exact}.",
    "run.attribution.estimate": "estimate (attribution patching)",
    "run.attribution.exact": "exact (activation patching)",
    "run.footer": "Written by glassformer (glassformer inspect); self-contained, works offline.",
    "run.js.step_of": "step {step} ({n} of {total})",
    "run.js.block": "block {block}",
    "run.js.after_last": "after the last",
    "run.js.tooltip": "{kind}, step {step}: layer {layer}, head {head} = {value}",
    # ---------------------------------------------------------------- the SAE feature pages (report_sae.py)
    "sae.title": "SAE features: {hook}",
    "sae.facts": "hook {hook} · {kind} SAE · {features} features, {live} fired on {tokens} held-out tokens, "
                 "{dead} did not",
    "sae.quality": "Quality on held-out text",
    "sae.metric.explained_variance": "variance explained",
    "sae.metric.mse": "MSE per element",
    "sae.metric.l0": "L0 (features per token)",
    "sae.metric.dead": "dead features",
    "sae.metric.dense": "dense features (> 10% of tokens)",
    "sae.metric.ce_clean": "loss, model as is",
    "sae.metric.ce_sae": "loss, SAE spliced in",
    "sae.metric.ce_zero": "loss, activation zeroed",
    "sae.metric.ce_recovered": "loss recovered",
    "sae.metric.tokens": "held-out tokens",
    "sae.features": "Features",
    "sae.search_placeholder": "feature id or token, e.g. 12 or ROMEO",
    "sae.search": "search features",
    "sae.sort": "sort features",
    "sae.sort.frequency": "most frequent first",
    "sae.sort.max": "largest activation first",
    "sae.sort.id": "by id",
    "sae.noscript": "The feature pages need JavaScript; the data is in the gf-sae-data script element.",
    # ---------------------------------------------------------------- glassformer demo (lessons/tiny_char.py)
    "demo.training_now": "Training the lessons' tiny character LM on four lines ({steps} steps, about {seconds} "
                         "seconds) ...",
    "demo.title": "Tiny character LM (lesson 12): four lines, one decoder-only Transformer",
    "demo.corpus": "  corpus: {chars} characters, {distinct} distinct; {windows} windows of {context}",
    "demo.shift": "  shift by one: input {input} -> target {target}",
    "demo.model": "  model: {layers} layers, d_model {d_model}, {heads} heads of {head_width}, ffn {ffn}: "
                  "{params} parameters",
    "demo.shapes": "  shapes: {shapes}",
    "demo.norm": "  LayerNorm([1, 2, 3, 4]) = {normalized} (matches (x - mean) / sqrt(var + eps)); residual sum {sum}",
    "demo.causality": "  causality: {checks} (token, position) pairs where a future token must not matter; "
                      "largest change {leak}",
    "demo.training": "  training (loss on all windows): {history}",
    "demo.accuracy": "  final train token accuracy: {accuracy}",
    "demo.greedy": "  greedy generation from {prefix}:",
    "demo.step": "    {step:>2}  {context:<24} -> {chosen} ({p})   top-4: {top}",
    "demo.generated": "  generated: {text}",
    "demo.checkpoint": "  checkpoint {path}: reloaded, logits differ by {diff}",
    "demo.wrote": "  wrote {files} to {folder} in {seconds} s",
    # ---------------------------------------------------------------- glassformer demo --lesson2 (lessons/lesson2.py)
    "lesson2.attention": "1. Attention equals torch.nn.MultiheadAttention (masks inverted at the boundary):",
    "lesson2.attention_diff": "   max |out diff| = {out}, max |weight diff| = {weight}",
    "lesson2.scale": "2. Why divide by sqrt(d): mean largest softmax weight / gradient norm over 16 keys",
    "lesson2.scale_head": "   d      unscaled max_w  scaled max_w   unscaled grad  scaled grad",
    "lesson2.permutation": "3. Permutation equivariance: max |f(Px) - P f(x)|",
    "lesson2.positions": "4. Positions on an order task (copy the left neighbour), accuracy after training:",
    "lesson2.chance": "   {pos:<11} {accuracy}   (chance {chance})",
    "lesson2.written": "findings written to {path}",
}

ZH: dict[str, str] = {
    "structure.causal": "decoder-only（因果）",
    "structure.bidirectional": "encoder-only（双向）",
    "structure.prefix": "前缀 LM",
    "structure.encoder-decoder": "encoder-decoder",
    "report.title": "glassformer 报告：{structure}",
    "report.summary": "{model} · {structure} · {dims} × {heads} 个头 · d_model {d_model} · {params} 个参数",
    "report.dims_lm": "{layers} 层",
    "report.dims_encdec": "编码器 {enc} 层 + 解码器 {dec} 层",
    "note.cap": "{name}共有 {n} 个 token；报告只保留前 {max_tokens} 个（max_tokens={max_tokens}），"
                "模型也只在这些 token 上运行。",
    "note.name.text": "输入",
    "note.name.target": "目标",
    "note.no_target_prefix": "没有给出目标：整段输入都是前缀（prefix_len = 输入的长度）。",
    "note.encoder_only": "encoder-only 模型不生成文本，所以没有生成轨迹。",
    "note.no_target_encdec": "没有给出目标：解码器读入起始 token，然后是模型自己贪心生成的输出。",
    "note.no_target_encdec_alone": "没有给出目标：解码器只读入起始 token。",
    "note.interpret_encdec": "logit lens、头评分和消融效果只对单栈模型（TransformerLM）绘制；"
                             "encoder-decoder 请直接使用 glassformer.interpret。",
    "note.heads_causal_only": "头评分（前一个 token、归纳头）只在因果模型上测量。",
    "note.trace_target": "生成轨迹只根据前缀作答，步数与目标的 {n} 个 token 相同：把它每一步的选择和目标对照着看。",
    "note.trace_same": "生成轨迹的每一步，贪心选择都是 {token}：随机权重的模型（--preset，未经训练）就是这样。"
                       "训练它，或者检查一个训练好的检查点，轨迹才有意义。",
    "view.self": "自注意力",
    "view.enc": "编码器自注意力",
    "view.dec": "解码器自注意力",
    "view.cross": "交叉注意力",
    "caption.causal": "每个 token 只看它自己和它前面的 token（因果掩码）。",
    "caption.bidirectional": "每个 token 都看整条序列的所有 token（没有因果掩码）。",
    "caption.prefix": "前 {prefix_len} 个 token（前缀）互相双向可见；前缀之后是因果的。",
    "caption.padded": "补齐的位置作为 key 被掩掉。",
    "caption.enc": "每个源 token 都看所有源 token（双向）。",
    "caption.dec": "每个目标 token 只看它自己和它前面的目标 token（因果）。",
    "caption.cross": "每个目标 token（query）去看编码器对每个源 token 的输出。",
    "caption.padded_source": "补齐的源位置作为 key 被掩掉。",
    "section.attention": "注意力",
    "noscript": "注意力视图需要 JavaScript；数据在 gf-data 这个 script 元素里。",
    "section.generation": "生成轨迹",
    "generation.intro": "贪心解码，共 {steps} 步：每一步列出最可能的 {top_k} 个下一个 token 及其概率，"
                        "选中的那个高亮显示。",
    "generation.continuation": "续写：",
    "generation.step": "步",
    "generation.chosen": "选中",
    "section.shapes": "前向传播的形状",
    "shapes.intro": "每个部分的输出形状，按运行顺序排列（B 批大小，T token 数，d 宽度，V 词表大小）。",
    "shapes.step": "步骤",
    "shapes.shape": "形状",
    "section.model": "模型",
    "model.params": "{params} 个可训练参数（共享的矩阵只算一次）。",
    "model.part": "部分",
    "model.parameters": "参数量",
    "model.total": "合计",
    "model.field": "配置项",
    "model.value": "值",
    "footer": "由 glassformer 生成；单个文件，离线可用。",
    "lens.title": "Logit lens（逐层读出）",
    "lens.intro": "如果模型在每个块之前就停下，残差流会预测哪个下一个 token（经模型自己的最后一层归一化和"
                  "输出层读出）；最后一行是模型的输出。每格：概率最高的 token 及其概率（鼠标悬停可看更多候选）。",
    "lens.read": "读出位置",
    "lens.before": "第 {block} 块之前",
    "lens.output": "输出",
    "lens.position": "位置 {n}",
    "heads.title": "头评分",
    "heads.intro": "在重复两遍的随机 token 上（先 {length} 个 token，再把这 {length} 个重复一遍）："
                   "每个头对前一个 token 的平均注意力；以及在第二遍里，对当前 token 第一次出现时"
                   "后面那个 token 的平均注意力（归纳头）。下一个 token 的损失：第一遍 {first}，重复的一遍 {repeat}。",
    "heads.previous": "前一个 token 评分",
    "heads.induction": "归纳头评分",
    "ablation.title": "消融效果",
    "ablation.intro": "把某一个头的输出置零后，模型对自己首选预测的对数概率（各位置的平均，完整模型为 {base}）"
                      "下降了多少；负数表示去掉这个头后预测反而更有把握。",
    "table.head": "头 {head}",
    "table.layer": "第 {layer} 层",
    "js.head_view": "头视图（head view）",
    "js.model_view": "模型视图（model view）",
    "js.layer": "层 ",
    "js.heads": "头",
    "js.all": "全部",
    "js.none": "全不选",
    "js.toggle_head": "显示或隐藏头 ",
    "js.padding_title": "补齐（作为 key 被掩掉）· ",
    "js.position": "位置 ",
    "js.left": "左边：",
    "js.right": " · 右边：",
    "js.target_queries": "目标 token（query）",
    "js.tokens_queries": "作为 query 的 token",
    "js.source_keys": "源 token（key）",
    "js.tokens_keys": "作为 key 的 token",
    "js.links_before": " · 每个 token、每个头只画最强的 ",
    "js.links_after": " 条连线；鼠标悬停或点击一个 token 可以看它的全部连线",
    "js.prefix_before": "前缀（",
    "js.prefix_after": " 个 token，双向可见）；红线：前缀边界",
    "js.padding": "补齐：没有任何 token 看它",
    "js.grid_caption": "行：层 · 列：头 · 每个方块：query 从上到下，key 从左到右，颜色越深权重越大"
                       "（颜色 ∝ √权重）。点击方块可以放大。",
    "js.head": "头 ",
    "js.layer_lower": "层 ",
    "js.click_enlarge": "（点击放大）",
    "js.zoom_layer": "层 ",
    "js.zoom_head": " · 头 ",
    "js.point": "把鼠标指向一个格子，读出它的权重。",
    "js.query": "query ",
    "js.key": " → key ",
    "run.title": "训练运行：{name}",
    "run.shape": "{layers} 层 × {heads} 个头，d_model {d_model}",
    "run.summary": "共 {steps} 步。",
    "run.summary_shape": "共 {steps} 步；{shape}。",
    "run.not_watched": "这次运行没有打开训练显微镜：在它的配置里加一个 <code>watch:</code> 块"
                       "（例如 <code>watch: {{every: 0}}</code>），"
                       "就会在每次评估时记录头评分、logit lens 和注意力快照。",
    "run.axis.step": "步数",
    "run.axis.cross_entropy": "交叉熵（nat）",
    "run.axis.nats": "nat",
    "run.axis.score": "评分",
    "run.chart.loss": "损失",
    "run.chart.probe": "重复的随机 token：每一遍上的损失",
    "run.chart.best_per_layer": "每层最好的头的评分",
    "run.chart.best": "最好的头的评分",
    "run.series.train": "训练损失",
    "run.series.val": "验证损失",
    "run.series.first": "第一遍上的损失",
    "run.series.repeat": "重复那一遍上的损失",
    "run.series.best_layer": "{kind}，第 {layer} 层",
    "run.series.best_head": "最好的{kind}头",
    "run.kind.induction": "归纳头评分",
    "run.kind.previous_token": "前一个 token 评分",
    "run.kind.duplicate": "重复 token 评分",
    "run.kind.entropy": "注意力熵（nat）",
    "run.short.induction": "归纳",
    "run.short.previous_token": "前一个 token",
    "run.short.duplicate": "重复 token",
    "run.short.entropy": "熵",
    "run.heatmap": "{kind}——{layers} 层（行）× {heads} 个头（列）",
    "run.snapshot": "第 {layer} 层，头 {head}",
    "run.slider": "步数",
    "run.heads.title": "注意力头",
    "run.heads.intro": "在重复两遍的随机 token 上：前一个 token 头往回看一个位置；归纳头看当前 token 上一次出现时"
                       "后面的那个 token；重复 token 头看上一次出现的那个 token 本身（1 表示总是看那里）。"
                       "熵在探针文本上测量（0：只看一个 key；越高：注意力越分散）。",
    "run.snapshots.title": "注意力快照",
    "run.snapshots.intro": "被观察的头在探针文本开头几个 token 上的注意力（行：query，列：key）：",
    "run.lens.intro": "在每个块之前（以及最后一个块之后）读出残差流，经过最后的归一化和输出层，在探针文本上得到的"
                      "下一个 token 损失；行从模型底层到顶层，列是步数（颜色越深，损失越低）。",
    "run.norms.read": "读出位置（之前）",
    "run.norms.resid": "残差流范数",
    "run.norms.weight": "块的权重范数",
    "run.norms.lens": "lens 损失",
    "run.attribution.title": "归因修补（attribution patching）",
    "run.attribution.intro": "把某一个头在干净数据（重复的随机 token）上的输出修补进被破坏的数据（第一遍被替换掉）："
                             "第二遍平均对数概率的变化（被破坏时 {corrupted}，干净时 {clean}）。左：梯度估计，"
                             "所有头合起来只要一次前向和一次反向；右：精确修补，每个头一次前向。各头之间的相关系数："
                             "{correlation}。影响最大的头，估计：{estimate}；精确：{exact}。",
    "run.attribution.estimate": "估计（归因修补）",
    "run.attribution.exact": "精确（激活修补）",
    "run.footer": "由 glassformer（glassformer inspect）生成；单个文件，离线可用。",
    "run.js.step_of": "第 {step} 步（第 {n} 个记录，共 {total} 个）",
    "run.js.block": "第 {block} 块",
    "run.js.after_last": "最后一块之后",
    "run.js.tooltip": "{kind}，第 {step} 步：第 {layer} 层，头 {head} = {value}",
    "sae.title": "SAE 特征：{hook}",
    "sae.facts": "挂载点 {hook} · {kind} SAE · 共 {features} 个特征，其中 {live} 个在 {tokens} 个留出 token 上激活过，"
                 "{dead} 个从未激活",
    "sae.quality": "在留出文本上的质量",
    "sae.metric.explained_variance": "解释的方差比例",
    "sae.metric.mse": "每个元素的 MSE",
    "sae.metric.l0": "L0（每个 token 激活的特征数）",
    "sae.metric.dead": "死特征",
    "sae.metric.dense": "稠密特征（在超过 10% 的 token 上激活）",
    "sae.metric.ce_clean": "损失：原样的模型",
    "sae.metric.ce_sae": "损失：接入 SAE 重建",
    "sae.metric.ce_zero": "损失：激活置零",
    "sae.metric.ce_recovered": "恢复的损失比例",
    "sae.metric.tokens": "留出 token 数",
    "sae.features": "特征",
    "sae.search_placeholder": "特征编号或 token，例如 12 或 ROMEO",
    "sae.search": "搜索特征",
    "sae.sort": "特征排序",
    "sae.sort.frequency": "最常激活的在前",
    "sae.sort.max": "最大激活值在前",
    "sae.sort.id": "按编号",
    "sae.noscript": "特征页面需要 JavaScript；数据在 gf-sae-data 这个 script 元素里。",
    "demo.training_now": "正在四行文本上训练课程里的小字符语言模型（{steps} 步，大约 {seconds} 秒）……",
    "demo.title": "小字符语言模型（第 12 讲）：四行文本，一个 decoder-only Transformer",
    "demo.corpus": "  语料：{chars} 个字符，{distinct} 种；长度 {context} 的训练窗口 {windows} 个",
    "demo.shift": "  错开一位：输入 {input} -> 目标 {target}",
    "demo.model": "  模型：{layers} 层，d_model {d_model}，{heads} 个头、每个头 {head_width} 维，FFN {ffn}："
                  "{params} 个参数",
    "demo.shapes": "  形状：{shapes}",
    "demo.norm": "  LayerNorm([1, 2, 3, 4]) = {normalized}（与 (x - 均值) / sqrt(方差 + eps) 一致）；残差相加 {sum}",
    "demo.causality": "  因果性：检查了 {checks} 个（token，位置）组合，未来的 token 都不该有影响；最大变化 {leak}",
    "demo.training": "  训练（所有窗口上的损失）：{history}",
    "demo.accuracy": "  最终训练集 token 准确率：{accuracy}",
    "demo.greedy": "  从 {prefix} 开始贪心生成：",
    "demo.step": "    {step:>2}  {context:<24} -> {chosen}（{p}）   前 4 个候选：{top}",
    "demo.generated": "  生成结果：{text}",
    "demo.checkpoint": "  检查点 {path}：重新加载后 logits 相差 {diff}",
    "demo.wrote": "  {files} 已写入 {folder}，用时 {seconds} 秒",
    "lesson2.attention": "1. 我们的注意力与 torch.nn.MultiheadAttention 结果相同（在调用处把掩码取反）：",
    "lesson2.attention_diff": "   输出最大差 |out diff| = {out}，权重最大差 |weight diff| = {weight}",
    "lesson2.scale": "2. 为什么除以 sqrt(d)：16 个 key 上 softmax 最大权重的平均值 / 梯度范数",
    "lesson2.scale_head": "   d      不缩放 max_w    缩放 max_w     不缩放 grad    缩放 grad",
    "lesson2.permutation": "3. 排列等变性：max |f(Px) - P f(x)|",
    "lesson2.positions": "4. 在一个只看顺序的任务上比较位置编码（复制左边邻居），训练后的准确率：",
    "lesson2.chance": "   {pos:<11} {accuracy}   （随机猜 {chance}）",
    "lesson2.written": "结果已写入 {path}",
}

MESSAGES: dict[str, Mapping[str, str]] = {"en": EN, "zh": ZH}
# What the demo's and the report's English wording gives each language (same keys; checked by the tests).


def locale_lang(environ: Mapping[str, str] | None = None) -> str:
    """``"zh"`` when the locale (``LC_ALL``, then ``LC_MESSAGES``, then ``LANG``) is Chinese, else ``"en"``."""
    env = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name, "")
        if value:  # the first one set decides, as in POSIX
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def resolve_lang(lang: str | None, name: str = "lang", environ: Mapping[str, str] | None = None) -> str:
    """``lang`` checked (one of :data:`LANGS`), or the locale's language when it is None.

    Raises:
        GlassformerError: naming ``name``, the value and the languages there are.
    """
    if lang is None:
        return locale_lang(environ)
    if lang not in LANGS:
        raise GlassformerError(f"{name} must be one of {', '.join(LANGS)}, got {shown(lang)}")
    return lang


def text(key: str, lang: str = "en", **fields: object) -> str:
    """The message ``key`` in ``lang``, its ``{fields}`` filled in (``str.format``)."""
    return MESSAGES[resolve_lang(lang)][key].format(**fields)


def fields(message: str) -> set[str]:
    """The ``{field}`` names a message uses."""
    return {name for _, name, _, _ in string.Formatter().parse(message) if name}


def js_labels(lang: str = "en") -> dict[str, str]:
    """The page script's labels (the ``js.`` messages, without the prefix), for the page's data."""
    table = MESSAGES[resolve_lang(lang)]
    return {key[3:]: value for key, value in table.items() if key.startswith("js.")}
