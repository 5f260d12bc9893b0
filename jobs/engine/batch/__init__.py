"""Batch mode (`judge.mode: batch`): the providers' Batch APIs as the judge, at about half the
price, within a completion window. The same read -> judge -> write pipeline as online with
another judge stage; `jobs.engine.batch_rounds` drives the rounds. Importing this package
imports none of its modules."""
