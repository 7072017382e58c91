"""Write tests/data/llm/chat_template_refs.json: what Hugging Face `transformers` renders (and the ids it
tokenizes to) for a set of conversations, with the SmolLM2 tokenizer folder's own chat template and a
few others that use the features chat templates rely on. qnnrt does not depend on transformers; run
this once, in a throwaway environment, when the cases change:

    pip install --target /tmp/tfx transformers
    PYTHONPATH=/tmp/tfx python tools/make_chat_template_refs.py [TOKENIZER_DIR]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import transformers
from transformers import AutoTokenizer

DEFAULT_FOLDER = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "hf_tokenizer_smollm2"
FOLDER = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_FOLDER
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "llm" / "chat_template_refs.json"

# templates beside the folder's own: BOS from a variable, namespace + loop controls, tojson,
# raise_exception on a bad role, the generation block
TEMPLATES = {
    "folder": None,
    "llama3_like": (
        "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}"
        "{% if m['role'] == 'system' and not loop.first %}{{ raise_exception('system must come first') }}{% endif %}"
        "{% set ns.n = ns.n + 1 %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
        "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"),
    "json_dump": (
        "{% for m in messages %}{% if m.role == 'user' %}{{ m | tojson }}\n{% continue %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{{ eos_token }}\n{% endfor %}"
        "{% if add_generation_prompt %}>>{% endif %}"),
    "dict_global": (
        "{% set d = dict(a=1, b='x') %}{% for m in messages %}[{{ m.role }}|{{ d.b }}]"
        "{{ m.content }}{% endfor %}"),
}

CONVERSATIONS = {
    "one_user": [{"role": "user", "content": "Hi"}],
    "system_first": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi! How can I help?"},
                   {"role": "user", "content": "Tell me a story about a cat."}],
    "unicode": [{"role": "user", "content": "Grüße, 東京 🐈 — «ok»  "}],
    "whitespace": [{"role": "user", "content": "  line one\n\n  line two\t"}],
}


def main() -> None:
    tok = AutoTokenizer.from_pretrained(str(FOLDER))
    cases = []
    for tname, template in TEMPLATES.items():
        for cname, messages in CONVERSATIONS.items():
            for gen in (True, False):
                text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                               add_generation_prompt=gen)
                ids = tok.apply_chat_template(messages, chat_template=template, tokenize=True,
                                              add_generation_prompt=gen, return_dict=False)
                cases.append({"template": tname, "conversation": cname, "add_generation_prompt": gen,
                              "text": text, "ids": list(map(int, ids))})
    bad = [{"role": "user", "content": "x"}, {"role": "system", "content": "late"}]
    try:
        tok.apply_chat_template(bad, chat_template=TEMPLATES["llama3_like"], tokenize=False)
        refused = None
    except Exception as e:  # noqa: BLE001 - recording what transformers says
        refused = str(e)
    OUT.write_text(json.dumps({"made_by": f"transformers {transformers.__version__}, tools/make_chat_template_refs.py",
                               "folder": FOLDER.name, "templates": {k: v for k, v in TEMPLATES.items() if v},
                               "conversations": CONVERSATIONS, "cases": cases,
                               "refused": {"messages": bad, "message": refused}},
                              indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
