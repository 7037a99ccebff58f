"""The command line: click commands that parse options and call the layers below.
"""
