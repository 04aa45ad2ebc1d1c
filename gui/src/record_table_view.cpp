// makeRecordTableView (see record_table_view.h).
#include "record_table_view.h"

#include <QHeaderView>

namespace dynamo::gui {

QTableView* makeRecordTableView(QAbstractItemModel* model, const char* name, QWidget* parent) {
  auto* t = new QTableView(parent);
  t->setObjectName(name);
  t->setModel(model);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->horizontalHeader()->setStretchLastSection(true);
  t->verticalHeader()->hide();
  t->setWordWrap(false);
  return t;
}

}  // namespace dynamo::gui
