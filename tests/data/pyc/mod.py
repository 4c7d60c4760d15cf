VALUE = "from the source"
