"""Real images as the project's image records: photographs that installed packages carry
(`photos`) and IDX files such as Fashion-MNIST (`idx`); docs/records.md, "Real data sources"."""
