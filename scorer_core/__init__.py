"""scorer_core: context precision for RAG retrieval, judged by an LLM or offline.

The pure library: prompts, verdict parsing, the precision maths and the judge interface. It
imports no Ray, fsspec or Polars, and litellm only when an LLM judge is used.

The public names are those `__init__.pyi` lists, each imported from its module on first use: a
process that needs one light module (the run's coordinator, which unpickles `Usage` in shard
reports) does not import the scorer, the judges and litellm's client through this package.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
