"""gdn/backends"""
