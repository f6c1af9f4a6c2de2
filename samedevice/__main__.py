from samedevice.cli import main

if __name__ == "__main__":  # not when multiprocessing re-imports the main module for a rank
    raise SystemExit(main())
