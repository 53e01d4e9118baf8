"""fedustat.secure"""
