from transformers_scratch.cli import main  # the command line lives in the package: `transformers-scratch`

main()
