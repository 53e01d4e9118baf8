"""fedustat.runtime"""
