"""Where hosts come from: our YAML inventory, Ansible inventories, hostlists.

    inventory = load_inventory(Path("inventories/example.yaml"))   # healthcheck.inventory.load
"""
