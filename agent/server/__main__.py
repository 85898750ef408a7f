"""`python -m agent.server`: the same as `aidai serve` (used by the tests and the load benchmark)."""

import typer

from agent.cli.serve_cmd import serve

if __name__ == "__main__":
    typer.run(serve)
