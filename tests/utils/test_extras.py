"""require_extra: the optional dependencies' one import path and one-line install message."""

from __future__ import annotations

import pytest

from rlvr.utils.extras import MissingExtraError, require_extra


def test_an_installed_module_is_returned():
    import json

    assert require_extra("json", "unused") is json
    assert require_extra("os.path", "unused").join("a", "b") == "a/b"  # a submodule by its dotted name


def test_a_missing_module_names_the_pip_line_and_is_an_import_error():
    with pytest.raises(MissingExtraError, match=r"^needs it: pip install 'rlvr\[x\]'$") as e:
        require_extra("rlvr_no_such_module", "needs it: pip install 'rlvr[x]'")
    assert isinstance(e.value, ImportError) and isinstance(e.value.__cause__, ImportError)
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[x\]' \(No module named 'rlvr_no_such_module'\)"):
        require_extra("rlvr_no_such_module", "pip install 'rlvr[x]'", cause=True)


def test_every_extra_import_goes_through_it():
    """The optional packages' import helpers each use require_extra (one place to change the message's form)."""
    import inspect

    from rlvr.distributed.ray_backend import import_ray
    from rlvr.engines.vllm import import_vllm
    from rlvr.envs.openenv_env import _client_class
    from rlvr.envs.retrieval import require_bm25s
    from rlvr.models.lora import require_peft
    from rlvr.serve.app import _web
    from rlvr.tasks.hf_dataset import _require_datasets
    from rlvr.tasks.procedural import _rg
    from rlvr.tasks.verifiers_taskset import import_verifiers

    for fn in (import_ray, import_vllm, _client_class, require_bm25s, require_peft, _web, _require_datasets, _rg,
               import_verifiers):
        src = inspect.getsource(fn)
        assert "require_extra(" in src and "import " not in src.split('"""')[-1], fn.__qualname__
