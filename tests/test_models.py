"""bertlab/models.py: loading the packaged encoder, and importing its code ahead of time."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow  # (4 s or more: the fast loop stays under 5 minutes, docs/architecture.md)
def test_import_model_code_imports_all_that_loading_the_packaged_model_needs():
    """The grader's fork server runs ``import_model_code`` so that each worker forked from it only
    loads MiniLM's weights. With transformers 5 its fast tokenizer moved (tokenization_bert_fast ->
    tokenization_bert): a name that no longer exists made the fork server's imports fail, silently,
    and every worker imported transformers' code again on its own. Here, in a fresh process: the
    imports succeed, and loading the model afterwards imports no module of transformers' BERT code."""
    script = (
        "import sys\n"
        "from bertlab.models import import_model_code, load_model\n"
        "import_model_code()\n"
        "def bert_code():  # (by file: transformers 5 adds old names as aliases of modules it has)\n"
        "    return {getattr(m, '__file__', None) or name for name, m in list(sys.modules.items())\n"
        "            if name.startswith('transformers.models.bert')}\n"
        "before = bert_code()\n"
        "load_model()\n"
        "print(sorted(bert_code() - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"import_model_code or load_model failed:\n{done.stderr[-3000:]}"
    assert done.stdout.strip() == "[]", (
        f"loading the model imported transformers' BERT modules that import_model_code left out: "
        f"{done.stdout.strip()} (add them to import_model_code)")
