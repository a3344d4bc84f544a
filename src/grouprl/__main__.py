"""``python -m grouprl`` runs the command line."""

from grouprl.cli import main

if __name__ == "__main__":
    main()
