// The table view every panel of the window uses over a RecordTable model: whole rows selected,
// one at a time, last column stretched, no row numbers.
#pragma once

#include <QAbstractItemModel>
#include <QTableView>

namespace dynamo::gui {

/// A QTableView over `model` named `name` (tests find widgets by object name).
QTableView* makeRecordTableView(QAbstractItemModel* model, const char* name, QWidget* parent);

}  // namespace dynamo::gui
