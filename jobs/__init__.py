"""The scoring job and its tools, around the pure `scorer_core` library.

The folders are the layers (cli -> tools -> run -> engine -> inputs -> core -> scorer_core);
docs/layout.md draws them and follows a run from an input file to Parquet.
"""
