"""A program's own start-up customisation: prints one line, as a site's would do work."""
print("the program's own sitecustomize ran")
