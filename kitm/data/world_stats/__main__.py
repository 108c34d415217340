from kitm.data.world_stats.cli import main

if __name__ == "__main__":
    main()
