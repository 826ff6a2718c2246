"""`python -m vllm.entrypoints.openai.api_server ARGS` in llmsim's image: `llmsim serve ARGS`."""

import sys

from llmsim.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
