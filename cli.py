"""``python cli.py COMMAND ...`` in a checkout: the same command as ``transformers-scratch`` once installed."""

from transformers_scratch.cli import main

if __name__ == "__main__":
    main()
