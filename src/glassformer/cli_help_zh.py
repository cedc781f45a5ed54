"""Each verb's ``--help`` in Chinese under ``--lang zh`` or a Chinese locale (issue 34 point 4).

cli.py builds the parser in English, then :func:`translate_help` swaps in the texts below: each verb's
description, its options' help strings, its epilog (examples stay as they are; in ``train --help`` the
config keys' comments too), and a help formatter that wraps by display columns (a Chinese character
takes two, so wrapping by ``len`` would overflow the terminal).

Option help strings are looked up by their English text, as gettext does: when someone edits an English
help string, its Chinese one is no longer found and tests/test_cli_zh.py names it. Torch-free and
standard library only: ``--help`` answers before torch loads. The vocabulary follows viz/messages_zh.py.
"""

from __future__ import annotations

import argparse
import re
import shutil

from .textwidth import display_width

# Each verb's description (the paragraph under its usage line).
DESCRIPTION_ZH = {
    "demo": "在四行内置文本上训练一个 2 层字符级 Transformer，并展示形状、检查、训练过程、一次贪心生成的逐步轨迹"
            "和检查点的重新加载。把 results.json、损失曲线和注意力图写到 --out。",
    "train": "用 YAML 配置训练；任何键都可以在命令行上用 --key value 覆盖（模型字段用 --model.KEY value）。"
             "把检查点（ckpt-NNNNNN/ 文件夹，由 last 和 best 指向）、metrics.jsonl、loss.png 和 summary.json "
             "写到 out_dir，并打印一段简短的总结；SIGTERM 或 Ctrl-C 会在保存之后停下，并打印继续训练的命令。"
             "--log tensorboard（或 wandb，或 tensorboard,wandb）还会把这次运行发送到跟踪工具。"
             "详见 docs/training.md。",
    "recipe": "训练并评估一个配方；写出 out_dir/results.json 并打印一段简短的总结。任何训练键都可以用 --key value "
              "覆盖，模型字段用 --model.KEY value，配方选项用 --recipe.KEY value（glassformer train --help 列出了"
              "所有键）。",
    "eval": "在整个文件上为检查点打分：损失、困惑度、词元准确率（字符级模型还有每字符比特数）。"
            "目标任务和窗口长度取自检查点的 training.json，除非另行给出。",
    "generate": "从检查点文件夹生成。默认贪心；--sample 按概率抽取词元（受 --temperature/--top_k/--top_p/--min_p "
                "影响）；--num_beams N 运行束搜索（与 Hugging Face 的语义相同）。--stream 边生成边打印文本；"
                "--trace 打印每一步的最佳候选。见 docs/generation.md。",
    "translate": "逐行翻译：从文件（纯文本或 .gz）或标准输入读入，每行一句，按相近长度分批；每行一句译文写到标准输出"
                 "（或 --output）。默认贪心，--beams N 使用束搜索。给出 --ref 时，sacreBLEU 打印到标准错误。",
    "inspect": "在 --text（和 --target）上运行模型一次，写出一个自包含的 HTML 文件（查看时无需联网）：每个注意力层的"
               "按头视图和模型视图（编码器-解码器还有编码器、解码器和交叉注意力）、形状轨迹、配置和参数量，"
               "以及会生成的模型的生成轨迹。",
    "convert": "在 Hugging Face 模型文件夹（config.json、model.safetensors、分词器文件）和 glassformer 检查点文件夹"
               "（model.safetensors、config.json、tokenizer.json）之间转换。不需要 transformers。",
    "embed": "用编码器编码每个 TEXT，在真实词元上池化它的最后一层隐藏状态（sentence-transformers 的做法），"
             "打印向量或它们的相似度矩阵。",
    "sae": "在一个钩子点的激活上训练稀疏自编码器（TopK 或 ReLU+L1），激活由文本文件流经模型得到。任何键都可以用 "
           "--key value 或在 --config 中给出；写出 out_dir（默认 CHECKPOINT/../sae-HOOK）：sae/（safetensors + "
           "JSON）、metrics.json、features.html 和 state/（--resume true 从它继续）。键的说明：docs/sae.md。",
    "bench": "计时训练（tokens/s、峰值内存、MFU）、贪心生成、return_attn=True 和 torch.compile，与 Hugging Face "
             "GPT-2（以及给出其 model.py 时的 nanoGPT 模型）在成对交替的轮次中并排比较，分别在 float32 和 bfloat16 "
             "autocast 下；在写明本机（CPU、其指令特性、每种精度实测的矩阵乘法峰值）的标题下打印 Markdown 表格，"
             "并把数字写成 JSON。",
}

# Every option's help string, by its English text (the same text in several verbs has one entry).
HELP_ZH = {
    # demo
    "output folder (default demo-output)": "输出文件夹（默认 demo-output）",
    "run lesson 2's experiments instead (attention vs torch.nn, sqrt(d), positions)":
        "改为运行第 2 课的实验（注意力与 torch.nn 对照、sqrt(d)、位置）",
    "language of the printed steps: en or zh (default: the locale; LANG=zh_CN.UTF-8 gives zh)":
        "打印步骤所用的语言：en 或 zh（默认：跟随区域设置；LANG=zh_CN.UTF-8 即 zh）",
    # train, recipe
    "YAML file of training keys (optional: overrides alone work)": "训练键的 YAML 文件（可选：只用命令行覆盖也行）",
    "print the run's summary as one JSON line instead of the readable lines":
        "把运行总结打印成一行 JSON，而不是易读的几行",
    "a shipped recipe's NAME (e.g. shakespeare_char_fast) or a recipe YAML file":
        "自带配方的名称（例如 shakespeare_char_fast）或一个配方 YAML 文件",
    "corpus folder (default: $GLASSFORMER_DATA or ./data); see docs/results.md":
        "语料文件夹（默认：$GLASSFORMER_DATA 或 ./data）；见 docs/results.md",
    "fetch a missing corpus from its public URL": "从公开网址下载缺少的语料",
    "print the results as JSON (without config and recipe) instead of the readable lines":
        "把结果打印成 JSON（不含配置和配方），而不是易读的几行",
    # eval
    "checkpoint folder (e.g. out/best)": "检查点文件夹（例如 out/best）",
    "text file (clm, mlm, prefix)": "文本文件（clm、mlm、prefix）",
    "source file (seq2seq)": "源语言文件（seq2seq）",
    "target file (seq2seq)": "目标语言文件（seq2seq）",
    ".tsv or .jsonl pairs file (seq2seq)": ".tsv 或 .jsonl 句对文件（seq2seq）",
    "what to score (default: the training one)": "评估的目标任务（默认：训练时的那个）",
    "windows (or sentence pairs) per batch (default 64)": "每批的窗口数（或句对数）（默认 64）",
    "window length (default: the training one)": "窗口长度（默认：训练时的长度）",
    "stop after this many batches (default: the whole file)": "评估这么多批之后停下（默认：整个文件）",
    "memory evaluation may use (8GB, 512MiB; default: what the machine has free)":
        "评估可用的内存（8GB、512MiB；默认：本机的空闲内存）",
    "auto, float32, bfloat16 or float16: bfloat16/float16 run under autocast; auto measures whether bfloat16 "
    "is faster here (default: float32)":
        "auto、float32、bfloat16 或 float16：bfloat16/float16 在 autocast 下运行；auto 实测 bfloat16 "
        "在本机是否更快（默认：float32）",
    # generate
    "checkpoint folder (model.safetensors, config.json, ...)": "检查点文件夹（model.safetensors、config.json 等）",
    "text to continue (an encoder-decoder translates it); repeat for a batch":
        "要续写的文本（编码器-解码器会翻译它）；重复给出即为一批",
    "sample instead of taking the most likely token": "按概率抽样，而不是取最可能的词元",
    "sampling temperature (> 0; default 1)": "抽样温度（> 0；默认 1）",
    "sample among the k most likely": "在最可能的 k 个词元中抽样",
    "nucleus threshold in (0, 1]": "核抽样阈值，取值 (0, 1]",
    "drop tokens below min_p x top": "去掉概率低于 min_p × 最高概率的词元",
    "beam search stop rule: true, false or never": "束搜索的停止规则：true、false 或 never",
    "make sampling reproducible": "让抽样可以复现",
    "stop string (repeatable)": "停止字符串（可重复给出）",
    "do not stop at the tokenizer's end-of-sequence token": "遇到分词器的序列结束词元时不停下",
    "recompute instead of KV caching": "每步重新计算，不用 KV 缓存",
    "print the text as it is generated": "边生成边打印文本",
    "print each step's top candidates and choice": "打印每一步的最佳候选和所选的词元",
    "also write the results (or trace) as JSON": "同时把结果（或轨迹）写成 JSON",
    "tokens to add (default 100)": "要新增的词元数（默认 100）",
    "penalise the tokens already present (> 1 repeats less; CTRL's rule, as in HF)":
        "惩罚已经出现过的词元（> 1 重复得更少；CTRL 的规则，与 HF 相同）",
    "never repeat an n-gram of this many tokens": "从不重复这么多个词元组成的 n-gram",
    "beam width (1 = no beam search, the default)": "束宽（1 = 不用束搜索，默认）",
    "outputs per prompt (at most --num_beams with beam search)": "每个提示的输出数（束搜索时至多 --num_beams）",
    "candidates shown per traced step (default 4)": "轨迹每一步显示的候选数（默认 4）",
    # translate
    "checkpoint folder of a seq2seq model (e.g. out/.../best)": "seq2seq 模型的检查点文件夹（例如 out/.../best）",
    "input files; none or '-' reads standard input": "输入文件；不给或给 '-' 则读标准输入",
    "beam width (1 = greedy, the default)": "束宽（1 = 贪心，默认）",
    "beam search: score / length**penalty (> 1 favours longer outputs)":
        "束搜索：得分 / 长度**penalty（> 1 偏向更长的输出）",
    "sentences decoded together": "一起解码的句子数",
    "longest output in tokens (default: 2 x source length + 10, at most max_len)":
        "输出的最大词元数（默认：2 × 源句长度 + 10，至多 max_len）",
    "write translations here instead of stdout": "把译文写到这里，而不是标准输出",
    "reference translations: print sacreBLEU": "参考译文：打印 sacreBLEU",
    "memory translation may use (8GB, 512MiB; default: what the machine has free)":
        "翻译可用的内存（8GB、512MiB；默认：本机的空闲内存）",
    # inspect
    "a glassformer checkpoint or Hugging Face model folder (or use --preset)":
        "glassformer 检查点或 Hugging Face 模型文件夹（或用 --preset）",
    "the input (required but for a run folder); the source of an encoder-decoder, the prefix of a prefix-LM":
        "输入（除运行文件夹外必需）；编码器-解码器的源文本，prefix-LM 的前缀",
    "encoder-decoder: the target; prefix-LM: the continuation": "编码器-解码器：目标文本；prefix-LM：续写部分",
    "the HTML file to write (default report.html; for a run folder OUT_DIR/run.html)":
        "要写的 HTML 文件（默认 report.html；运行文件夹则为 OUT_DIR/run.html）",
    "prefix-LM: prefix length in tokens (default: --text)": "prefix-LM：前缀的词元数（默认：--text 的长度）",
    "right-pad the input to this many tokens, to see padding": "把输入在右侧填充到这么多个词元，以便观察填充",
    "steps of the generation trace (0: none)": "生成轨迹的步数（0：不生成）",
    "candidates shown per generation step": "每个生成步骤显示的候选数",
    "language of the report's labels: en or zh (default: the locale; LANG=zh_CN.UTF-8: zh)":
        "报告标签的语言：en 或 zh（默认：跟随区域设置；LANG=zh_CN.UTF-8 即 zh）",
    "longer inputs are cut to this many tokens (noted in the report)": "更长的输入截断到这么多个词元（报告中会注明）",
    "let the tokenizer add its bos/eos ([CLS]/[SEP]) around --text (the default for a Hugging Face folder's "
    "tokenizer, as in transformers)":
        "让分词器在 --text 两端加上它的 bos/eos（[CLS]/[SEP]）（Hugging Face 文件夹的分词器默认如此，与 "
        "transformers 相同）",
    "encode --text without them (the default for glassformer's own tokenizers)":
        "编码 --text 时不加它们（glassformer 自己的分词器默认如此）",
    "add the logit lens: the top next token read before each block, at every position":
        "加入 logit lens：在每个位置、每个块之前读出的最可能的下一个词元",
    "add each head's previous-token and induction score (causal models)":
        "加入每个头的前一词元得分和归纳得分（因果模型）",
    "add each head's ablation effect on the model's own predictions (one forward per head)":
        "加入消融每个头对模型自身预测的影响（每个头一次前向计算）",
    "a ModelConfig preset with random weights and a byte tokenizer": "一个 ModelConfig 预设，随机权重加字节分词器",
    "with --preset: override its attention type": "配合 --preset：改用这种注意力类型",
    "with --preset: the random seed of the weights": "配合 --preset：权重的随机种子",
    # convert
    "the folder to read": "要读取的文件夹",
    "the folder to write (replaced only if glassformer wrote it)": "要写入的文件夹（只有 glassformer 写的才会被替换）",
    # embed
    "the sentences": "句子",
    "a Hugging Face folder or glassformer checkpoint": "Hugging Face 文件夹或 glassformer 检查点",
    "print the cosine similarity matrix instead": "改为打印余弦相似度矩阵",
    "mean over real tokens (default) or the first token's vector": "在真实词元上取平均（默认），或取第一个词元的向量",
    "do not L2-normalise the vectors": "不对向量做 L2 归一化",
    "decimals printed": "打印的小数位数",
    "memory embedding may use (8GB, 512MiB; default: what the machine has free)":
        "嵌入可用的内存（8GB、512MiB；默认：本机的空闲内存）",
    # sae
    "a glassformer checkpoint folder (e.g. out/run/best)": "glassformer 检查点文件夹（例如 out/run/best）",
    "YAML file of SAE keys (optional: --key value alone works)": "SAE 键的 YAML 文件（可选：只用 --key value 也行）",
    # bench
    "comma-separated parts: train, gen, attn, compile, scaling (default: train, gen, attn, compile; --quick "
    "drops compile)":
        "逗号分隔的部分：train、gen、attn、compile、scaling（默认：train、gen、attn、compile；--quick 去掉 compile）",
    "comma-separated model sizes: small, baby (default: both)": "逗号分隔的模型规模：small、baby（默认：两者）",
    "fewer rounds, batch-1 generation only, no compile (a minute or two on an idle CPU)":
        "更少的轮次，只测批大小为 1 的生成，不测 compile（空闲 CPU 上一两分钟）",
    "paired rounds per measurement": "每项测量的成对轮数",
    "cpu or cuda (default: cpu)": "cpu 或 cuda（默认：cpu）",
    "comma-separated: auto, float32, bfloat16, float16 (16-bit = torch.autocast, float32 weights; auto = what "
    "precision auto can pick here: float32, plus bfloat16 where the device has bfloat16 instructions; default: "
    "auto; --dtype is an alias)":
        "逗号分隔：auto、float32、bfloat16、float16（16 位 = torch.autocast，float32 权重；auto = precision auto "
        "在本机可能选的：float32，设备有 bfloat16 指令时再加 bfloat16；默认：auto；--dtype 是别名）",
    "nanoGPT's model.py (or the folder holding it): adds nanoGPT's model as a training contender and a "
    "'vs nanogpt' column":
        "nanoGPT 的 model.py（或它所在的文件夹）：把 nanoGPT 的模型加为训练对手，并加一列 'vs nanogpt'",
    "torch CPU threads (default: torch's choice)": "torch 的 CPU 线程数（默认：torch 自己的选择）",
    "skip the Hugging Face contenders": "跳过 Hugging Face 的对手",
    "where to write the JSON": "JSON 写到哪里",
    "print the kernel choices measured on this machine (and where they are kept), then stop":
        "打印本机实测的内核选择（以及保存的位置），然后停止",
    "forget this machine's kernel choices (measured again when next needed), then stop":
        "忘掉本机的内核选择（下次需要时重新测量），然后停止",
    "time each default choice (Newton-Schulz precision, precision auto, the decode route, threads, compile) "
    "against its plain alternative here; exit 1 when one loses (with --quick: under a minute, no compile; "
    "--only picks checks: newton_schulz, precision, decode_route, threads, compile)":
        "在本机把每个默认选择（Newton-Schulz 精度、precision auto、解码路线、线程、compile）与它的朴素替代方案"
        "对比计时；有默认输了就以状态 1 退出（加 --quick：一分钟以内，不测 compile；--only 选择检查项："
        "newton_schulz、precision、decode_route、threads、compile）",
    "with --defaults: how much slower than its alternative a default may be (default 0.10)":
        "配合 --defaults：默认选择最多可以比替代方案慢多少（默认 0.10）",
}

# Titles of the verbs' option groups, by their English text.
GROUP_ZH = {
    "why, not only what (glassformer.interpret; single-stack models)":
        "不只是什么，还有为什么（glassformer.interpret；单栈模型）",
    "model without a checkpoint": "不用检查点的模型",
}

# The epilogs' paragraphs, by their English opening (the example blocks keep their lines: only the
# header and the notes of PHRASE_ZH change).
PARAGRAPH_ZH = {
    "CHECKPOINT is a training run's folder":
        "CHECKPOINT 是一次训练运行的文件夹（它的 out_dir，含 metrics.jsonl：运行页面，不需要 --text），或者 "
        "glassformer 检查点文件夹，或者 Hugging Face 模型文件夹（GPT-2、Llama、BERT、BART；由 glassformer.interop "
        "读取，不需要 transformers）。不给时，--preset 构建一个随机权重、字节级分词器的模型：它的注意力没有意义，"
        "但它的掩码（因果、前缀、填充）与训练好的模型完全一样地显示出来。",
    "The direction follows SRC":
        '方向由 SRC 决定：config.json 中有 "model_type" 的文件夹是 Hugging Face 文件夹；否则是 glassformer 检查点。'
        "支持的模型家族：GPT-2、Llama、BERT、BART（docs/interop.md）。",
    "--model is a Hugging Face folder":
        '--model 是 Hugging Face 文件夹（不经 transformers 读取）或编码器（attn="bidirectional"）的 glassformer '
        "检查点。不加 --similarity 时，每个文本打印为一行 JSON。",
    "precision:\n":
        "精度：\n  每个训练、生成和 return_attn 行都在 --precision 的每种精度下运行：float32，或者在 torch.autocast "
        "下以 bfloat16/float16 做前向计算，权重和 AdamW 保持 float32（混合精度，人们训练的方式）。表格的 precision "
        "列写明是哪种；训练行的 MFU 以标题中该精度的矩阵乘法峰值为准。compile 和 scaling 使用第一种。"
        "auto 表示 precision: auto 在本机可能选的（float32，CPU 或 GPU 有 bfloat16 指令时再加 bfloat16）。",
    "nanoGPT:\n":
        "nanoGPT：\n  glassformer 不附带它：把 --nanogpt 指向一个 checkout 的 model.py；它的 GPT 在每个规模上构建"
        "（偏置与 glassformer 的相同，dropout 0），在相同的轮次中用相同的步骤和 AdamW 训练，训练表格多出一列 "
        "'vs nanogpt'。",
    "See docs/benchmarks.md.": "见 docs/benchmarks.md。",
}

# Notes inside example lines.
PHRASE_ZH = {"(a run folder: writes its run.html)": "（运行文件夹：写出它的 run.html）"}

# Lines of the generated epilogs (train's key list, recipe's shipped list), by their English start.
EPILOG_LINE_ZH = {
    "examples:": "示例：",
    "example: ": "示例：",
    "shipped recipes: ": "自带的配方：",
    "config keys (in the YAML file, or as --key value; default, then what it is):":
        "配置键（写在 YAML 文件里，或用 --key value；先是默认值，然后是含义）：",
    "model keys (model: section, or --model.KEY value; vocab_size comes from the tokenizer):":
        "模型键（YAML 的 model: 部分，或 --model.KEY value；vocab_size 来自分词器）：",
    "  (objective clm without a preset starts from ": "  （objective 为 clm 且不用预设时，从这些值开始：",
}

# train --help: each config key's comment (training/config.py's, in Chinese), by key.
TRAIN_KEY_ZH = {
    "objective": '"clm"（GPT）、"mlm"（BERT）、"prefix"（prefix-LM）、"seq2seq"（编码器-解码器）',
    "data": "clm/mlm/prefix 的文本文件",
    "val_data": "验证文本；为空：取 data 的最后 val_fraction",
    "val_fraction": "与 nanoGPT 相同：前 90% 训练，后 10% 验证",
    "src": "seq2seq：源语言文件（每行一句；纯文本或 .gz）",
    "tgt": "seq2seq：目标语言文件，与 src 平行",
    "pairs": "seq2seq：用一个 .tsv 或 .jsonl 句对文件代替 src/tgt",
    "tokenizer": '"char"、"byte" 或 "bpe"',
    "tokenizer_vocab_size": "bpe 的词表大小",
    "specials": "特殊词元；None：目标任务需要的那些",
    "model": 'ModelConfig 的字段（以及 "preset"）',
    "block_size": "每个训练窗口的词元数（seq2seq：最长的源句/目标句）",
    "batch_size": "每个优化步的序列数，合计所有进程和累积步",
    "grad_accum": "每个优化步的微批数（每个进程）",
    "lr": "峰值学习率",
    "min_lr": "余弦调度的下限",
    "lr_schedule": '"cosine"、"noam" 或 "constant"',
    "lr_decay_steps": "余弦衰减结束的步数；None：max_steps",
    "optimizer": '"adamw"，或 "muon"（隐藏层权重矩阵用 torch.optim.Muon，其余用 AdamW）',
    "weight_decay": "只作用于权重矩阵",
    "grad_clip": "全局梯度范数的上限；0 = 关闭",
    "mask_prob": "mlm：被选中的词元比例",
    "eval_every": "两次评估（和检查点）之间的步数；0 = 只在结束时",
    "eval_batches": "None：整个验证集",
    "device": '"auto"、"cpu"、"cuda"、"cuda:1" 等',
    "precision": '"auto"、"float32"、"bfloat16" 或 "float16"（autocast；旧名：dtype）',
    "compile": "用 torch.compile 编译模型",
    "parallel": '在 torchrun 下："ddp"（DistributedDataParallel）或 "fsdp"（FSDP2 的 fully_shard）',
    "fused_adamw": "None：可用时使用融合的 AdamW 内核",
    "num_threads": "torch 的 CPU 线程数；None：torch 的默认值",
    "resume": "out_dir/last 存在时从它继续",
    "cache_dir": "内存映射的词元缓存；None：out_dir/cache",
    "progress": "在终端上显示进度条，否则每 log_every 步在标准错误上打印一行；false：安静",
    "log": '跟踪工具："tensorboard"、"wandb"（离线）、"none"；两者都用："tensorboard,wandb"',
    "max_memory": '这次运行可用的内存（"8GB"、"512MiB"、字节数）；None：本机的空闲内存',
    "watch": "训练显微镜（interpret/microscope.py）；{}：关闭",
}

_KEY_LINE = re.compile(r"(  --(\w+) \S+ +)\S.*")  # "  --lr 1e-3                        peak learning rate"


def wrap_columns(text: str, width: int) -> list[str]:
    """``text`` (whitespace collapsed) wrapped to lines of at most ``width`` display columns: breaks at
    spaces and between any two CJK characters, never before closing punctuation (，。；：）、) nor after
    an opening bracket."""
    tokens = re.findall(r"[\x21-\x7e]+|\s+|.", " ".join(text.split()))
    lines: list[str] = []
    line: list[str] = []  # the current line's tokens
    for token in tokens:
        if token.isspace():
            line += [" "] if line else []
            continue
        if line and display_width("".join(line).rstrip() + token) > width:
            keep = len(line)
            if token in _CLOSING:  # closing punctuation never starts a line: what it closes comes down too
                keep -= 1
                while keep > 1 and line[keep] in _CLOSING:
                    keep -= 1
            while keep > 1 and line[keep - 1] in _OPENING:  # nor does an opening bracket end one
                keep -= 1
            keep = keep if "".join(line[:keep]).strip() else len(line)  # a line too narrow for the rules
            lines.append("".join(line[:keep]).rstrip())
            line = line[keep:]
            while line and line[0] == " ":
                line.pop(0)
        line.append(token)
    text = "".join(line).strip()
    return [*lines, text] if text else lines


_CLOSING = set("，。；：）、！？」")
_OPENING = set("（「")


class ColumnsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help layout with option help wrapped by display columns (descriptions and epilogs are
    laid out here: :func:`translate_help` wraps the descriptions)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_columns(text, width)

    def _format_usage(self, usage: str | None, actions: list, groups: list, prefix: str | None) -> str:
        # argparse lays out the usage lines by len(prefix): "用法：" is 3 characters but 6 columns
        prefix = argparse._("usage: ") if prefix is None else prefix
        mask = "\0" * display_width(prefix)
        return super()._format_usage(usage, actions, groups, mask).replace(mask, prefix, 1)


def translate_epilog(epilog: str) -> str:
    """An epilog in Chinese: each paragraph of :data:`PARAGRAPH_ZH` whole; the other blocks line by line
    (headers from :data:`EPILOG_LINE_ZH`, notes from :data:`PHRASE_ZH`, ``train``'s key comments from
    :data:`TRAIN_KEY_ZH`), their example commands unchanged."""
    blocks = []
    for block in epilog.split("\n\n"):
        opening = next((key for key in PARAGRAPH_ZH if block.startswith(key)), None)
        blocks.append(PARAGRAPH_ZH[opening] if opening else "\n".join(map(_translate_line, block.split("\n"))))
    return "\n\n".join(blocks)


def _translate_line(line: str) -> str:
    match = _KEY_LINE.fullmatch(line)
    if match and match[2] in TRAIN_KEY_ZH:
        return match[1] + TRAIN_KEY_ZH[match[2]]
    for english, chinese in PHRASE_ZH.items():
        line = line.replace(english, chinese)
    for english, chinese in EPILOG_LINE_ZH.items():
        if line.startswith(english):
            line = chinese + line[len(english):]
            return line[:-1] + "）" if chinese.startswith("  （") else line
    return line


def translate_help(verbs: argparse._SubParsersAction) -> None:
    """Put every verb parser of ``verbs`` into Chinese: description, option help strings, epilog and a
    formatter that wraps by display columns. A help string without a translation stays English."""
    width = max(40, min(100, shutil.get_terminal_size().columns - 2))
    for verb, parser in verbs.choices.items():
        if verb in DESCRIPTION_ZH:
            parser.description = "\n".join(wrap_columns(DESCRIPTION_ZH[verb], width))
        if parser.epilog:
            parser.epilog = "\n".join(_wrap_line(line, width) for line in translate_epilog(parser.epilog).split("\n"))
        parser.formatter_class = ColumnsHelpFormatter
        for action in parser._actions:
            if isinstance(action.help, str):
                action.help = HELP_ZH.get(action.help, action.help)
        for group in parser._action_groups:
            group.title = GROUP_ZH.get(group.title, group.title)


def _wrap_line(line: str, width: int) -> str:
    """One epilog line wrapped to ``width`` columns, its indent kept; example commands stay whole."""
    indent = line[:len(line) - len(line.lstrip())]
    example = line.lstrip().startswith("glassformer ") and line.isascii()
    if display_width(line) <= width or example:
        return line
    return "\n".join(indent + part for part in wrap_columns(line, width - len(indent)))
