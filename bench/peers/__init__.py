"""The side-by-side benchmark's helpers: a judge server that also answers DeepEval's and RAGAS's
prompts (`responder`), and the drivers that run those tools in their own throwaway venv
(`deepeval_driver`, `ragas_driver`; they import deepeval/ragas and never run in the project's
venv)."""
