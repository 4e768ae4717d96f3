"""One module per `rolellm` command, each with `make_parser(subparsers=None)` and `main(args)`; `recipe.py` reads the
YAML recipes (`--config`) they share."""
